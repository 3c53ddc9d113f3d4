// #/c/i/params — the parameters against the objective: parallel coordinates (colour = objective,
// the best on top, readable past a few dozen trials since the server downsamples keeping the
// best), a slice plot per parameter, and a contour (binned mean objective) of a chosen pair.
import {h, fmt, figure, section, note} from '../dom.js';
import {chartDiv, draw, tip} from '../charts.js';

const pairs = new Map();  // per campaign: [x, y] of the contour
const BINS = 16;

function isNumeric(p) {
  return p.type === 'float' || p.type === 'int' || p.type === 'integer';
}

// The bin of value v on parameter p, and the labels of p's bins.
function binner(p, values) {
  if (!isNumeric(p)) {
    const labels = p.choices ? p.choices.map(String) : [...new Set(values.map(String))].sort();
    return {labels, bin: (v) => labels.indexOf(String(v))};
  }
  const present = values.filter((v) => typeof v === 'number');
  let lo = p.low ?? Math.min(...present), hi = p.high ?? Math.max(...present);
  const log = p.log && lo > 0 && hi > 0;
  const f = (v) => (log ? Math.log(v) : v);
  const a = f(lo), b = f(hi);
  const width = (b - a) / BINS || 1;
  const labels = [];
  for (let k = 0; k < BINS; ++k) {
    const c = a + (k + 0.5) * width;
    labels.push(fmt(Number((log ? Math.exp(c) : c).toPrecision(3))));
  }
  return {labels, bin: (v) => (typeof v !== 'number' ? -1 : Math.min(BINS - 1, Math.max(0, Math.floor((f(v) - a) / width))))};
}

function axisFor(p) {
  if (!isNumeric(p)) return {type: 'category', data: p.choices ? p.choices.map(String) : undefined};
  if (p.log && p.low > 0) return {type: 'log', min: p.low, max: p.high};
  return {type: 'value', min: p.low ?? undefined, max: p.high ?? undefined};
}

function paramValue(p, v) {
  if (v === undefined || v === null) return null;
  return isNumeric(p) ? v : String(v);
}

export default async function params(ctx) {
  const stage = ctx.query.get('stage');
  const d = await ctx.api(`/api/campaigns/${ctx.i}/params${stage ? `?stage=${encodeURIComponent(stage)}` : ''}`);
  const ps = d.params || [];
  const pts = d.points || [];
  const objs = pts.map((q) => q.objective).filter((x) => typeof x === 'number');
  const lo = objs.length ? Math.min(...objs) : 0, hi = objs.length ? Math.max(...objs) : 1;
  const better = d.mode === 'max' ? 1 : -1;
  // The visual map runs from worst (light) to best (dark), whatever the mode. Its ends are labelled
  // with the objective's maximum and minimum (text[0] is the high end), and its handles with
  // enough decimals to tell them apart (ECharts rounds to 0 decimals by default: 0.71 and 0.93 both
  // read "1").
  const span = Math.abs(hi - lo) || Math.abs(hi) || 1;
  const precision = Math.min(10, Math.max(0, 2 - Math.floor(Math.log10(span))));
  const visual = (dim) => ({type: 'continuous', min: lo, max: hi, dimension: dim, inverse: d.mode !== 'max', calculable: true,
                            inRange: {color: ['#d7e3f7', '#7aa3e5', '#2f5fb8', '#b23a4e']}, right: 0, top: 'center',
                            precision, formatter: (x) => fmt(x),
                            text: [`${fmt(hi)} (${d.mode === 'max' ? 'best' : 'worst'})`, `${fmt(lo)} (${d.mode === 'max' ? 'worst' : 'best'})`],
                            itemHeight: 120});
  const chartParallel = chartDiv('parallel', 'tall');
  const chartSlice = chartDiv('slice');
  const chartContour = chartDiv('contour', 'tall');
  const xs = h('select', {id: 'contour-x'}, ps.map((p) => h('option', {value: p.name}, p.name)));
  const ys = h('select', {id: 'contour-y'}, ps.map((p) => h('option', {value: p.name}, p.name)));
  const chosen = pairs.get(ctx.i) || [ps[0] && ps[0].name, ps[1] ? ps[1].name : ps[0] && ps[0].name];
  xs.value = chosen[0] ?? '';
  ys.value = chosen[1] ?? '';
  const sec = section('params', 'Parameters',
    h('p', {}, figure('params-shown', d.shown ?? pts.length), ' trials shown of ', figure('params-total', d.total ?? pts.length),
      ` finished · objective ${d.objective ?? ''} (${d.mode ?? ''})`,
      d.total > d.shown ? ' · downsampled on the server: the best fifth kept, an even stride of the rest' : ''),
    pts.length ? null : note('No finished trial with an objective yet.'),
    h('h2', {}, 'Parallel coordinates'), chartParallel,
    h('h2', {}, 'Slices'), chartSlice,
    h('h2', {}, 'Contour'), h('div', {class: 'toolbar'}, h('label', {}, 'x ', xs), h('label', {}, 'y ', ys)), chartContour);
  ctx.mount(sec);

  // Parallel coordinates: the best trials drawn last (on top).
  const sorted = [...pts].sort((a, b) => better * ((a.objective ?? -Infinity * better) - (b.objective ?? -Infinity * better)));
  const pAxes = ps.map((p, k) => ({dim: k, name: p.name, ...axisFor(p), nameTextStyle: {fontSize: 11}}));
  pAxes.push({dim: ps.length, name: d.objective ?? 'objective', type: 'value', scale: true});
  draw(chartParallel, {
    parallel: {left: 60, right: 110, top: 50, bottom: 30, parallelAxisDefault: {nameLocation: 'end', nameGap: 12}},
    parallelAxis: pAxes,
    visualMap: visual(ps.length),
    tooltip: {trigger: 'item', formatter: tip((q) => `trial #${q.data.trial}\n` +
                                                  ps.map((p, k) => `${p.name} = ${fmt(q.value[k])}`).join('\n') + `\nobjective ${fmt(q.value[ps.length])}`)},
    series: [{type: 'parallel', lineStyle: {width: 1, opacity: pts.length > 200 ? 0.35 : 0.6}, emphasis: {lineStyle: {width: 3, opacity: 1}},
              data: sorted.map((q) => ({value: [...ps.map((p) => paramValue(p, q.params[p.name])), q.objective], trial: q.trial}))}],
  });

  // Slices: one grid per parameter, objective on y.
  const cols = Math.min(3, Math.max(1, ps.length));
  const rows = Math.ceil(ps.length / cols) || 1;
  const cellH = 230;
  chartSlice.style.height = `${rows * cellH + 30}px`;  // CSSOM (allowed by the CSP)
  const grids = [], xAxes = [], yAxes = [], series = [], titles = [];
  ps.forEach((p, k) => {
    const r = Math.floor(k / cols), c = k % cols;
    const left = `${(c / cols) * 100 + 6}%`, width = `${100 / cols - 9}%`;
    grids.push({left, width, top: r * cellH + 40, height: cellH - 80});
    titles.push({text: p.name, left: `${(c / cols) * 100 + 6}%`, top: r * cellH + 18, textStyle: {fontSize: 12}});
    xAxes.push({gridIndex: k, ...axisFor(p), name: '', scale: true});
    yAxes.push({gridIndex: k, type: 'value', scale: true, name: k % cols === 0 ? (d.objective ?? 'objective') : ''});
    series.push({type: 'scatter', xAxisIndex: k, yAxisIndex: k, symbolSize: 5, name: p.name,
                 data: pts.filter((q) => q.params[p.name] !== undefined).map((q) => ({value: [paramValue(p, q.params[p.name]), q.objective], trial: q.trial}))});
  });
  draw(chartSlice, {
    title: titles, grid: grids, xAxis: xAxes, yAxis: yAxes, series,
    visualMap: {...visual(1), show: false, seriesIndex: series.map((_, k) => k)},
    tooltip: {trigger: 'item', formatter: tip((q) => `trial #${q.data.trial}\n${q.seriesName} = ${fmt(q.value[0])}\nobjective ${fmt(q.value[1])}`)},
  });

  const contour = () => {
    const px = ps.find((p) => p.name === xs.value), py = ps.find((p) => p.name === ys.value);
    pairs.set(ctx.i, [xs.value, ys.value]);
    if (!px || !py) return;
    const bx = binner(px, pts.map((q) => q.params[px.name])), by = binner(py, pts.map((q) => q.params[py.name]));
    const sum = new Map(), count = new Map();
    for (const q of pts) {
      const a = bx.bin(q.params[px.name]), b = by.bin(q.params[py.name]);
      if (a < 0 || b < 0 || typeof q.objective !== 'number') continue;
      const key = `${a},${b}`;
      sum.set(key, (sum.get(key) || 0) + q.objective);
      count.set(key, (count.get(key) || 0) + 1);
    }
    const cells = [...sum.keys()].map((key) => {
      const [a, b] = key.split(',').map(Number);
      return [a, b, sum.get(key) / count.get(key), count.get(key)];
    });
    draw(chartContour, {
      grid: {left: 90, right: 110, top: 30, bottom: 60},
      xAxis: {type: 'category', data: bx.labels, name: px.name, nameLocation: 'middle', nameGap: 35, splitArea: {show: true}},
      yAxis: {type: 'category', data: by.labels, name: py.name, nameLocation: 'middle', nameGap: 65, splitArea: {show: true}},
      visualMap: {...visual(2)},
      tooltip: {trigger: 'item', formatter: tip((q) => `${px.name} ≈ ${bx.labels[q.value[0]]}\n${py.name} ≈ ${by.labels[q.value[1]]}\n` +
                                                    `mean objective ${fmt(q.value[2])} (${q.value[3]} trials)`)},
      series: [{type: 'heatmap', data: cells, emphasis: {itemStyle: {borderColor: '#333', borderWidth: 1}}}],
    });
  };
  xs.addEventListener('change', contour);
  ys.addEventListener('change', contour);
  contour();
  return sec;
}
