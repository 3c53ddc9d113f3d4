// The settings of the classifier training loop (classifier_training.h), declared once for the mlp
// and cnn kinds, which add their layers (mlp_settings.cpp, cnn_settings.cpp).
#include "trainers/trainer_settings.h"
#include "trainers/internal_params.h"
#include "trainers/data_parallel.h"
#include "trainers/idx_header.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <unordered_set>

namespace hpctune::trainers {

std::optional<ClassesProblem> classes_problem(const std::vector<int64_t>& classes) {
  std::unordered_set<int64_t> seen;
  for (std::size_t i = 0; i < classes.size(); ++i)
    if (!seen.insert(classes[i]).second)
      return ClassesProblem{i, "distinct classes (" + std::to_string(classes[i]) + " is listed twice)"};
  if (classes.size() == 1) return ClassesProblem{0, "[] for every class, or at least 2 classes"};
  return std::nullopt;
}

std::vector<SettingDecl> classifier_loop_setting_specs();

std::vector<SettingDecl> classifier_common_setting_specs() {
  std::vector<SettingDecl> specs = classifier_loop_setting_specs();
  for (SettingDecl& d : data_parallel_setting_specs()) specs.push_back(std::move(d));  // trainer.sync & co.
  return specs;
}

std::vector<SettingDecl> classifier_loop_setting_specs() {
  using T = SettingType;
  return {
      {.key = "data", .type = T::kString, .default_value = kDefaultDataDir,
       .help = "Directory of the IDX dataset: {train,t10k}-{images-idx3,labels-idx1}-ubyte, gzipped or not.",
       .aliases = {"dataset", "data_dir", "path"}},
      {.key = "standardize", .type = T::kBool, .default_value = false,
       .help = "Scale the pixels to zero mean and unit variance (training-set statistics).",
       .aliases = {"normalize", "standardise", "scale"}},
      {.key = "lr", .type = T::kFloat, .default_value = 0.05, .min = 0, .help = "Learning rate (before lr_scaling).",
       .min_exclusive = true, .aliases = {"learning_rate", "learningrate", "step_size", "eta"}},
      {.key = "lr_schedule", .type = T::kString, .default_value = "cosine", .choices = {"constant", "cosine"},
       .help = "Learning-rate schedule: constant, or cosine (lr * (1 + cos(pi * t / T)) / 2 over the T "
               "minibatches of the run).",
       .aliases = {"schedule", "lr_scheduler", "scheduler", "decay_schedule"}},
      // Momentum 1 never decays (the velocity sums every gradient), anything below is a momentum.
      {.key = "momentum", .type = T::kFloat, .default_value = 0.9, .min = 0, .max = 1,
       .help = "Momentum of SGD (optimizer: sgd).", .max_exclusive = true, .aliases = {"mu", "beta"}},
      {.key = "nesterov", .type = T::kBool, .default_value = false,
       .help = "Use Nesterov momentum (optimizer: sgd)."},
      {.key = "weight_decay", .type = T::kFloat, .default_value = 0.0, .min = 0,
       .help = "Weight decay on weights (not biases): an L2 penalty added to the gradients for sgd and adam, "
               "decoupled (AdamW) for adamw.", .aliases = {"l2", "wd", "decay", "l2_penalty"}},
      {.key = "batch_size", .type = T::kInt, .default_value = 128, .min = 1, .max = 65536,
       .help = "Examples per optimizer step: the global minibatch, which data-parallel ranks share.",
       .aliases = {"batch", "batchsize", "minibatch", "mini_batch_size"}},
      {.key = "epochs", .type = T::kInt, .default_value = 10, .min = 1, .max = 1000,
       .help = "Passes over the training data; a report follows each.",
       .aliases = {"num_epochs", "max_epochs", "n_epochs", "steps"}},
      // Holding out more than half of the data for validation leaves too little to train on.
      {.key = "val_fraction", .type = T::kFloat, .default_value = 0.1, .min = 0, .max = 0.5,
       .help = "Share of the (capped) training file held out for validation (the val_* metrics).",
       .min_exclusive = true, .aliases = {"validation_split", "val_split", "validation_fraction", "holdout"}},
      {.key = "data_seed", .type = T::kInt, .default_value = 0, .min = 0,
       .help = "Seed of the data split: which images are held out for validation and which are trained on "
               "(max_train_samples). The same for every trial of a campaign, so that row i of every trial's "
               "val_probs.npy is the same image (val_indices.npy lists them); the trial's own seed drives "
               "initialisation, shuffling and dropout.", .aliases = {"split_seed", "data_split_seed"},
       .default_note = "seed (the campaign's, --seed included)"},
      {.key = "max_train_samples", .type = T::kInt, .default_value = 0, .min = 0,
       .help = "Use at most this many images of the training file, validation included (0 = all).",
       .aliases = {"train_samples", "max_samples", "subset", "limit"}},
      {.key = "max_test_samples", .type = T::kInt, .default_value = 0, .min = 0,
       .help = "Evaluate on at most the first this many test images (0 = all).",
       .aliases = {"test_samples", "max_eval_samples"}},
      {.key = "device", .type = T::kString, .default_value = "cpu", .choices = {"cpu", "gpu"},
       .help = "Where the trial trains: cpu (BLAS and oneDNN) or gpu (CUDA: cuBLAS, cuDNN; the first GPU the process "
               "sees, so give groups GPUs with resources.gpus_per_rank). Same network, optimizer, checkpoints and "
               "predictions: a trial moves between them at any epoch.",
       .aliases = {"backend", "accelerator"}},
      {.key = "precision", .type = T::kString, .default_value = "fp32", .choices = {"fp32", "tf32", "bf16"},
       .help = "GPU arithmetic (device: gpu): fp32, tf32 (tensor cores for GEMMs and convolutions) or bf16 (dense "
               "layers' GEMM inputs in bf16 with fp32 accumulation, convolutions in TF32; fp32 master weights). The CPU "
               "trains in fp32 only.",
       .aliases = {"dtype", "math"}},
      {.key = "deterministic", .type = T::kBool, .default_value = false,
       .help = "GPU (device: gpu): deterministic kernels only, so the same seed gives bit-identical weights (slower "
               "convolutions). The CPU is deterministic for a fixed thread count anyway."},
      {.key = "optimizer", .type = T::kString, .default_value = "sgd", .choices = {"sgd", "adam", "adamw"},
       .help = "sgd (with momentum and nesterov), adam, or adamw (Adam with decoupled weight decay); PyTorch's "
               "definitions.",
       .aliases = {"optim", "solver", "update_rule"}},
      {.key = "beta1", .type = T::kFloat, .default_value = 0.9, .min = 0, .max = 1,
       .help = "Adam's first-moment decay (optimizer: adam, adamw).", .max_exclusive = true,
       .aliases = {"adam_beta1", "b1"}},
      {.key = "beta2", .type = T::kFloat, .default_value = 0.999, .min = 0, .max = 1,
       .help = "Adam's second-moment decay (optimizer: adam, adamw).", .max_exclusive = true,
       .aliases = {"adam_beta2", "b2"}},
      {.key = "eps", .type = T::kFloat, .default_value = 1e-8, .min = 0,
       .help = "Adam's denominator epsilon (optimizer: adam, adamw).", .min_exclusive = true,
       .aliases = {"epsilon", "adam_eps"}},
      {.key = "lr_scaling", .type = T::kString, .default_value = "none", .choices = {"none", "linear"},
       .help = "none, or linear: the rate is lr * batch_size / base_batch_size (Goyal et al. 2017), for large "
               "data-parallel batches.",
       .aliases = {"lr_scale", "scale_lr", "linear_scaling"}},
      {.key = "base_batch_size", .type = T::kInt, .default_value = 128, .min = 1, .max = 65536,
       .help = "The batch size lr is meant for, with lr_scaling: linear.",
       .aliases = {"reference_batch_size", "base_batch"}},
      {.key = "warmup_epochs", .type = T::kFloat, .default_value = 0.0, .min = 0, .max = 1000,
       .help = "Epochs of gradual warmup (Goyal et al.): the rate ramps linearly per minibatch from lr (from 0 when "
               "lr_scaling does not raise it) to the scaled rate.", .aliases = {"warmup", "lr_warmup_epochs"}},
      {.key = "checkpoint", .type = T::kBool, .default_value = true,
       .help = "Write a checkpoint after every epoch in the trial directory, and resume from it when the trial runs "
               "again.", .aliases = {"checkpoints", "checkpointing", "resume"}},
      {.key = "micro_batches", .type = T::kInt, .default_value = 0, .min = 0, .max = 65536,
       .help = "Pipeline micro-batches per minibatch with model > 1 (0 = 2 x the model ranks).",
       .aliases = {"microbatches", "num_micro_batches", "chunks"}},
      {.key = "allreduce", .type = T::kString, .default_value = "hierarchical",
       .choices = {"mpi", "ring", "recursive_doubling", "hierarchical"},
       .help = "How data-parallel ranks average gradients: mpi (MPI_Allreduce), ring (reduce-scatter then "
               "allgather), recursive_doubling (butterfly) or hierarchical (through the node's shared memory, "
               "then across nodes).",
       .aliases = {"allreduce_algorithm", "collective"}},
      {.key = "classes", .type = T::kIntList, .default_value = nlohmann::json::array(), .min = 0, .max = 65535,
       .help = "Train and test on these classes only, relabelled 0..k-1 in the order listed (the output layer has "
               "k units); [] for every class. max_train_samples and the validation split apply after this filter "
               "(classes: [5, 6, 7, 8, 9] with max_train_samples: 500 is 500 images of classes 5-9, validation "
               "included), max_test_samples to the filtered test file. A class the data lacks fails the trial.",
       .aliases = {"class_subset", "target_classes", "subset_classes"}},
      {.key = kInitFromParam, .type = T::kString, .default_value = "",
       .help = "Transfer learning: a checkpoint file (an export) or a trial directory (its checkpoint-stage*.bin) "
               "whose weights start every layer but the output layer, which is new and sized to this trial's "
               "classes; the architecture must otherwise be the source's. The optimizer starts fresh. \"\" for a "
               "fresh initialisation.",
       .aliases = {"pretrained", "init_checkpoint", "warm_start", "source_checkpoint", "finetune_from"}},
      {.key = "freeze", .type = T::kInt, .default_value = 0, .min = 0, .max = 10000,
       .help = "Freeze the first N layers of the network (as it lists them: dense, conv, maxpool and dropout layers "
               "each count): their weights stay exactly as initialised or loaded by init_from. At most the layers "
               "before the output layer.",
       .aliases = {"freeze_layers", "frozen_layers", "num_frozen"}},
      // LP-FT (Kumar et al. 2022): a new head trained on features that do not move first, so that
      // the first fine-tuning steps are not driven by a random head's large gradients.
      {.key = "head_epochs", .type = T::kInt, .default_value = 0, .min = 0, .max = 1000,
       .help = "Transfer learning, LP-FT (Kumar et al. 2022): the first N epochs train only the output layer (a "
               "linear probe of the other layers' features), the remaining epochs every layer not frozen; at most "
               "`epochs`. The learning-rate schedule spans all the epochs. A transfer stage's baseline twins train "
               "every layer from the first epoch (0).",
       // No aliases: the transfer stage resets this key by its name on baseline twins.
      },
      {.key = "body_lr_scale", .type = T::kFloat, .default_value = 1.0, .min = 0, .max = 1,
       .help = "Discriminative rates: every layer but the output layer trains at lr x this (a smaller rate for "
               "transferred layers than for the new head); 1 = one rate for all. A transfer stage's baseline twins "
               "train at one rate (1).",
       .min_exclusive = true},  // no aliases either (the twins' reset)
      {.key = "save_predictions", .type = T::kBool, .default_value = true,
       .help = "Save the validation and test class probabilities (val_probs.npy, test_probs.npy), the validation "
               "images' indices (val_indices.npy) and the rows' labels (val_labels.npy, test_labels.npy) in the "
               "trial directory and register them as artifacts.",
       .aliases = {"predictions", "save_probs"}},
  };
}

namespace {

// The rules between the classifier loop's settings (TrainerCapabilities::setting_rules), in the order
// the trainer reads them (classifier_training.cpp: parse_classifier_common).
std::optional<std::pair<std::string, std::string>> classifier_rules_problem(const nlohmann::json& s) {
  auto text = [&](const char* key) -> const std::string* {
    return s.contains(key) && s[key].is_string() ? &s[key].get_ref<const std::string&>() : nullptr;
  };
  if (const std::string* data = text("data"); data != nullptr && data->empty()) return {{"data", "a directory"}};
  const std::string* device = text("device");
  const std::string* precision = text("precision");
  if (device != nullptr && precision != nullptr && *device != "gpu" && *precision != "fp32")
    return {{"precision", "fp32 with device: cpu (tf32 and bf16 are GPU arithmetic)"}};
  if (s.contains("head_epochs") && s.contains("epochs") && s["head_epochs"].is_number() && s["epochs"].is_number() &&
      s["head_epochs"].get<double>() > s["epochs"].get<double>())
    return {{"head_epochs", "at most 'epochs' (" + format_number(s["epochs"].get<double>()) + ")"}};
  // One image: held out for validation, none left to train on (classifier_data.cpp).
  if (s.contains("max_train_samples") && s["max_train_samples"].is_number_integer() &&
      s["max_train_samples"].get<int64_t>() == 1)
    return {{"max_train_samples", "0 (every image) or at least 2 (one is held out for validation)"}};
  // The GPU backends train by a plain allreduce (classifier_training.cpp: parse_classifier_common).
  if (device != nullptr && *device == "gpu") {
    const std::string gpu = " with device: gpu (the GPU trains by a plain allreduce only)";
    if (const std::string* sync = text("sync"); sync != nullptr && *sync != "allreduce") return {{"sync", "allreduce" + gpu}};
    if (const std::string* c = text("gradient_compression"); c != nullptr && *c != "none")
      return {{"gradient_compression", "none" + gpu}};
    if (s.contains("min_replica_fraction") && s["min_replica_fraction"].is_number() &&
        s["min_replica_fraction"].get<double>() < 1.0)
      return {{"min_replica_fraction", "1" + gpu}};
  }
  return std::nullopt;
}

// The rules between the classifier loop's sync and its group's layout (TrainerCapabilities::
// layout_rules), as classifier_run.cpp (choose_epoch_runner) refuses them.
std::optional<std::pair<std::string, std::string>> classifier_layout_problem(const nlohmann::json& s, int64_t data,
                                                                             int64_t model) {
  auto text = [&](const char* key) -> std::string {
    return s.contains(key) && s[key].is_string() ? s[key].get<std::string>() : std::string();
  };
  const std::string sync = text("sync");
  if (sync == "hogwild" && data * model > 1)
    return {{"sync", "allreduce or ssp in a group of " + std::to_string(data * model) +
                         " ranks (resources.ranks): hogwild trains with the threads of one rank"}};
  if (data <= 1 || model <= 1) return std::nullopt;
  const std::string pipeline = " with " + std::to_string(model) +
                               " model stages (resources.ranks.model): pipeline stages exchange gradients by allreduce only";
  if (sync == "downpour") return {{"sync", "allreduce" + pipeline + " (downpour keeps replicas of whole models)"}};
  if (sync == "ssp") return {{"sync", "allreduce" + pipeline}};
  if (sync != "allreduce") return std::nullopt;
  if (text("gradient_compression") == "1bit") return {{"gradient_compression", "none" + pipeline}};
  if (s.contains("min_replica_fraction") && s["min_replica_fraction"].is_number() &&
      s["min_replica_fraction"].get<double>() < 1.0)
    return {{"min_replica_fraction", "1" + pipeline}};
  return std::nullopt;
}

}  // namespace

namespace {

bool is_open(const std::vector<std::string>& open, const char* key) {
  return std::find(open.begin(), open.end(), key) != open.end();
}

// A class of `classes` (the list, or a lone label: "" below) that the data lacks, as
// classifier_data.cpp (map_classes) refuses it.
std::optional<DataProblem> missing_class(const nlohmann::json& classes, const std::string& dir, const IdxSetShape& shape) {
  const bool lone = classes.is_number_integer();
  const nlohmann::json list = lone ? nlohmann::json::array({classes}) : classes;
  if (!list.is_array()) return std::nullopt;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_number_integer()) return std::nullopt;  // the declaration refuses it
    const int64_t c = list[i].get<int64_t>();
    const bool labelled = c >= 0 && c < shape.classes;
    if (labelled && shape.train_per_class[static_cast<std::size_t>(c)] > 0) continue;
    std::string below;
    if (!lone) below.append("[").append(std::to_string(i)).append("]");
    std::string what = "class " + std::to_string(c) + " is not in the data: the training file of '" + dir + "' has classes 0..";
    what += std::to_string(shape.classes - 1);
    if (labelled) what.append(", but no image of class ").append(std::to_string(c));
    return DataProblem{"classes", std::move(below), std::move(what)};
  }
  return std::nullopt;
}

// init_from (classifier_start.cpp: read_source_checkpoint): a checkpoint file, or a directory holding
// checkpoint-stage*.bin (the first is checkpoint-stage0.bin), that exists where validate runs.
std::optional<DataProblem> missing_checkpoint(const nlohmann::json& s, const std::vector<std::string>& open) {
  if (is_open(open, kInitFromParam) || !s.contains(kInitFromParam) || !s[kInitFromParam].is_string()) return std::nullopt;
  const std::string path = s[kInitFromParam].get<std::string>();
  if (path.empty()) return std::nullopt;
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  if (dir && !std::filesystem::exists(path + "/checkpoint-stage0.bin", ec))
    return DataProblem{kInitFromParam, "", "the directory '" + path + "' holds no checkpoint-stage0.bin (a trial's checkpoint)"};
  if (!dir && !std::filesystem::is_regular_file(path, ec))
    return DataProblem{kInitFromParam, "", "'" + path + "': no such checkpoint file or directory"};
  return std::nullopt;
}

}  // namespace

std::optional<DataProblem> classifier_data_problem(const nlohmann::json& s, const std::vector<std::string>& open,
                                                   IdxSetShape* shape_out) {
  if (auto problem = missing_checkpoint(s, open)) return problem;
  if (is_open(open, "data") || !s.contains("data") || !s["data"].is_string()) return std::nullopt;
  const std::string dir = s["data"].get<std::string>();
  if (dir.empty()) return std::nullopt;  // the setting rules refuse it
  auto shape = read_idx_set_shape(dir);
  if (!shape.ok())
    return DataProblem{"data", "", shape.error().message() + " (the IDX data set of every trial: " +
                                       "{train,t10k}-{images-idx3,labels-idx1}-ubyte, gzipped or not)"};
  if (shape_out != nullptr) *shape_out = *shape;
  if (shape->classes == 0) return std::nullopt;  // too many labels to count here: the trainer judges them
  const nlohmann::json& classes = s.contains("classes") ? s["classes"] : nlohmann::json();
  const bool every_class = classes.is_array() && classes.empty();
  if (every_class && shape->classes < 2)
    return DataProblem{"data", "", "the labels of '" + dir + "' are all 0: a classifier needs at least 2 classes"};
  if (is_open(open, "classes")) return std::nullopt;
  return missing_class(classes, dir, *shape);
}

// What the classifier loop does for mlp and cnn (trainer_settings.h): it trains `epochs` epochs and
// writes predictions and checkpoints unless their settings turn them off.
TrainerCapabilities classifier_capabilities() {
  TrainerCapabilities can;
  can.step_setting = "epochs";
  can.predictions = {.written = true, .switch_setting = "save_predictions", .task = "classification"};
  can.checkpoints = {.written = true, .switch_setting = "checkpoint"};
  can.init_setting = kInitFromParam;
  can.freeze_setting = "freeze";
  can.twin_resets = {{"head_epochs", 0}, {"body_lr_scale", 1.0}};
  can.rank_loss_setting = "sync";
  can.rank_loss_values = {"downpour", "ssp"};
  can.setting_rules = {&classifier_rules_problem,
                       {"data", "device", "precision", "epochs", "head_epochs", "max_train_samples", "sync",
                        "gradient_compression", "min_replica_fraction"}};
  can.layout_rules = {&classifier_layout_problem, {"sync", "gradient_compression", "min_replica_fraction"}};
  // classifier_outputs.cpp (finish), classifier_run.cpp and the epoch runners (add_metrics: sync_*);
  // every epoch: classifier_training.cpp.
  can.metrics = {{"val_loss", "val_accuracy", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
                  "train_seconds", "images_per_second"},
                 {"resumed_epoch", "sync_"},
                 {"val_loss", "val_accuracy", "train_loss", "train_accuracy", "epoch_seconds"}};
  can.data_rules = {[](const nlohmann::json& s, const std::vector<std::string>& open) {
                      return classifier_data_problem(s, open, nullptr);
                    },
                    {"data", "classes", kInitFromParam}};
  return can;
}

}  // namespace hpctune::trainers
