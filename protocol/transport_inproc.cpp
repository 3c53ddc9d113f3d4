#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "protocol/messages.h"
#include "protocol/transport.h"

namespace hpctune::protocol {

struct InProcHub::State {
  std::mutex mu;
  std::condition_variable server_cv;
  std::deque<Envelope> server_inbox;
  struct Client {
    std::deque<std::string> inbox;
    std::condition_variable cv;
    bool woken = false;
  };
  std::map<PeerId, std::shared_ptr<Client>> clients;
  uint64_t next_id = 1;
  std::string endpoint;
};

namespace {

class InProcServer final : public ServerTransport {
 public:
  explicit InProcServer(std::shared_ptr<InProcHub::State> state) : s_(std::move(state)) {}

  std::string endpoint() const override { return s_->endpoint; }

  Status send(const PeerId& peer, std::string_view bytes) override {
    std::lock_guard lock(s_->mu);
    auto it = s_->clients.find(peer);
    if (it == s_->clients.end()) return err(Errc::kPeerGone, "peer " + peer + " is not connected");
    it->second->inbox.emplace_back(bytes);
    it->second->cv.notify_one();
    return {};
  }

  Result<std::optional<Envelope>> recv(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(s_->mu);
    // A zero timeout is a poll: no wait, so no futex call (the simulator polls millions of times).
    const bool ready = timeout.count() <= 0 ? !s_->server_inbox.empty()
                                            : s_->server_cv.wait_for(lock, timeout, [&] { return !s_->server_inbox.empty(); });
    if (!ready) return std::optional<Envelope>();
    Envelope e = std::move(s_->server_inbox.front());
    s_->server_inbox.pop_front();
    return std::optional<Envelope>(std::move(e));
  }

 private:
  std::shared_ptr<InProcHub::State> s_;
};

class InProcClient final : public ClientTransport {
 public:
  explicit InProcClient(std::shared_ptr<InProcHub::State> state) : s_(std::move(state)) { attach(); }
  ~InProcClient() override {
    std::lock_guard lock(s_->mu);
    s_->clients.erase(id_);
  }

  Status send(std::string_view bytes) override {
    std::lock_guard lock(s_->mu);
    if (!s_->clients.count(id_)) return err(Errc::kPeerGone, "disconnected from the hub");
    if (static_cast<int64_t>(bytes.size()) > protocol::kMaxMessageBytes) return {};  // dropped, like ZMQ_MAXMSGSIZE
    s_->server_inbox.push_back(Envelope{id_, std::string(bytes)});
    s_->server_cv.notify_one();
    return {};
  }

  Result<std::optional<std::string>> recv(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(s_->mu);
    auto client = me_;
    if (timeout.count() > 0) client->cv.wait_for(lock, timeout, [&] { return !client->inbox.empty() || client->woken; });
    client->woken = false;
    if (client->inbox.empty()) return std::optional<std::string>();
    std::string bytes = std::move(client->inbox.front());
    client->inbox.pop_front();
    return std::optional<std::string>(std::move(bytes));
  }

  Status reconnect() override {
    std::lock_guard lock(s_->mu);
    s_->clients.erase(id_);
    attach_locked();
    return {};
  }

  void notify() override {
    std::lock_guard lock(s_->mu);
    me_->woken = true;
    me_->cv.notify_one();
  }

 private:
  void attach() {
    std::lock_guard lock(s_->mu);
    attach_locked();
  }
  void attach_locked() {
    bool woken = me_ && me_->woken;
    id_ = "inproc-" + std::to_string(s_->next_id++);
    me_ = std::make_shared<InProcHub::State::Client>();
    me_->woken = woken;
    s_->clients[id_] = me_;
  }

  std::shared_ptr<InProcHub::State> s_;
  std::shared_ptr<InProcHub::State::Client> me_;
  PeerId id_;
};

}  // namespace

InProcHub::InProcHub() : state_(std::make_shared<State>()) {
  static std::atomic<uint64_t> counter{0};
  state_->endpoint = "inproc://hub-" + std::to_string(++counter);
}
InProcHub::~InProcHub() = default;

std::unique_ptr<ServerTransport> InProcHub::server() { return std::make_unique<InProcServer>(state_); }
std::unique_ptr<ClientTransport> InProcHub::connect() { return std::make_unique<InProcClient>(state_); }

void InProcHub::drop(const PeerId& peer) {
  std::lock_guard lock(state_->mu);
  state_->clients.erase(peer);
}

}  // namespace hpctune::protocol
