// DOM helpers for the dashboard: every node is built with createElement and every piece of data
// goes in as text (textContent), never as HTML, so a campaign name, a parameter value, an error
// text or a log line can hold `<img src=x onerror=...>` and still only be shown.

// h('div', {class: 'x', id: 'y', dataset: {figure: 'n'}, onclick: fn}, child, 'text', ...)
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'text') el.textContent = String(value);
    else if (key in el && typeof value !== 'string') el[key] = value;  // checked, value, hidden, ...
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// A number as the API gives it: integers as they are, floats to 6 significant digits; null → "—".
export function fmt(x) {
  if (x === null || x === undefined) return '—';
  if (typeof x !== 'number') return String(x);
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-4 || a >= 1e9)) return x.toExponential(5).replace(/\.?0+e/, 'e');
  return String(Number(x.toPrecision(6)));
}

// Seconds as "1h 02m", "3m 05s", "12.3 s".
export function duration(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return '—';
  if (s < 60) return `${Number(s.toPrecision(3))} s`;
  const m = Math.floor(s / 60), sec = Math.round(s % 60);
  if (m < 60) return `${m}m ${String(sec).padStart(2, '0')}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${String(m % 60).padStart(2, '0')}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

export function when(t) {
  if (t === null || t === undefined) return '—';
  const d = new Date(t * 1000);
  return `${d.toLocaleDateString()} ${d.toLocaleTimeString()}`;
}

// A number shown for the tests: <span data-figure=NAME data-value=RAW>text</span>. The text is for
// people (a duration, a rounded percentage); data-value keeps the API's number, "" for null.
export function figure(name, value, text) {
  const raw = value === null || value === undefined ? '' : String(value);
  return h('span', {class: 'figure', dataset: {figure: name, value: raw}}, text !== undefined ? text : fmt(value));
}

// A labelled figure box of the overview kind.
export function stat(label, ...content) {
  return h('div', {class: 'stat'}, h('div', {class: 'stat-label'}, label), h('div', {class: 'stat-value'}, ...content));
}

export function link(href, text, attrs = {}) {
  return h('a', {href, ...attrs}, text);
}

export function trialLink(i, id, attrs = {}) {
  return link(`#/c/${i}/trials/${id}`, `#${id}`, attrs);
}

export function stateBadge(state) {
  return h('span', {class: `state state-${String(state).replace(/[^a-z_]/g, '')}`}, state);
}

// A text cell by the rules of the server's CSV writer (report/csv.h, csv_field): = + - @, a tab or
// a CR at the start, or right after a ';' (where a ';'-separated locale splits), would be a formula
// in a spreadsheet: prefix ' (a plain number such as -0.5 stays); a cell holding , ; " CR or LF is
// quoted.
const kPlainNumber = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
export function csvCell(text) {
  const s = String(text ?? '').split(';')
    .map((part) => (/^[=+\-@\t\r]/.test(part) && !kPlainNumber.test(part) ? `'${part}` : part)).join(';');
  return /[",;\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function download(filename, text, type = 'text/csv') {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const a = h('a', {href: url, download: filename, hidden: true});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// The CSV of a table as shown (header row, then body rows), cells by their text.
export function tableCsv(table) {
  const rows = [];
  for (const tr of table.querySelectorAll('tr')) {
    rows.push([...tr.children].map((c) => csvCell(c.dataset.csv ?? c.textContent.trim())).join(','));
  }
  return rows.join('\r\n') + '\r\n';
}

// A table in a box that scrolls (wide tables stay inside the screen) with its CSV button above.
// columns: [{key, label, sort?, cell: (row) => node|text, csv?: (row) => text}]
export function table(id, columns, rows, opts = {}) {
  const thead = h('thead', {}, h('tr', {}, columns.map((c) =>
    h('th', {dataset: c.sort ? {sort: c.sort} : undefined, class: c.sort ? 'sortable' : undefined,
             title: c.title}, c.label))));
  const tbody = h('tbody', {}, rows.map((r) => {
    const tr = h('tr', {dataset: opts.rowData ? opts.rowData(r) : undefined},
                 columns.map((c) => {
                   const td = h('td', {class: c.class}, c.cell(r));
                   if (c.csv) td.dataset.csv = c.csv(r);
                   return td;
                 }));
    return tr;
  }));
  const t = h('table', {id, class: 'data'}, thead, tbody);
  const filename = opts.filename || `${id}.csv`;
  const button = h('button', {class: 'csv', type: 'button', dataset: {table: id}, title: 'Export this table as CSV',
                              onclick: () => download(filename, tableCsv(t))}, 'CSV');
  return h('div', {class: 'table-box'}, h('div', {class: 'table-tools'}, opts.tools || null, button),
           h('div', {class: 'table-wrap'}, t));
}

export function section(name, title, ...children) {
  return h('section', {id: `view-${name}`, class: 'view'}, h('h1', {}, title), ...children);
}

export function note(text) {
  return h('p', {class: 'note'}, text);
}
