// ECharts helpers: a chart is a <div class="chart" id="chart-NAME"> holding one ECharts instance
// (the global `echarts` of /assets/echarts.min.js, loaded by loadCharts() before the first view
// that draws one: the campaigns list, the overview and the trials table open without parsing
// its 1 MB). Every chart gets the toolbox's PNG export, a
// tooltip whose text is escaped (a campaign's strings are data, never HTML), and keeps its zoom
// across a live re-render.
import {h} from './dom.js';

// The zoom windows of the charts of the view being re-rendered, by chart id (app.js saves them).
const savedZoom = new Map();
const instances = new Set();

export const palette = ['#3b6fd6', '#e07b39', '#3aa57a', '#c9475c', '#8b62c9', '#9a7b4f', '#d169b4', '#7f8c8d',
                        '#b8b82e', '#2fb3c4'];
export const stateColor = {
  done: '#3aa57a', running: '#3b6fd6', failed: '#c9475c', pruned: '#e0a039', queued: '#9aa5b1',
  assigned: '#6c8ebf', paused: '#8b62c9', interrupted: '#7f8c8d',
};

let loading = null;

// Loads ECharts once (a script element of our own origin: the CSP allows it); resolves when `echarts` is defined.
export function loadCharts() {
  if (typeof window.echarts !== 'undefined') return Promise.resolve();
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const script = document.createElement('script');
      script.src = '/assets/echarts.min.js';
      script.onload = () => resolve();
      script.onerror = () => {
        loading = null;
        reject(new Error('could not load /assets/echarts.min.js'));
      };
      document.head.append(script);
    });
  }
  return loading;
}

export function esc(text) {
  return echarts.format.encodeHTML(String(text ?? ''));
}

// A tooltip formatter from one that returns plain text lines: escaped, then joined with <br>.
export function tip(fn) {
  return (params) => {
    const text = fn(params);
    if (text === null || text === undefined) return '';
    return String(text).split('\n').map(esc).join('<br>');
  };
}

export function chartDiv(name, cls = '') {
  return h('div', {class: `chart ${cls}`.trim(), id: `chart-${name}`});
}

// Starts ECharts on `el` (already in the document) with `option`, adding the toolbox and the saved zoom.
export function draw(el, option) {
  let chart = echarts.getInstanceByDom(el);
  if (!chart) {
    chart = echarts.init(el, null, {renderer: 'canvas'});
    instances.add(chart);
  }
  const o = {
    animation: false,
    color: palette,
    textStyle: {fontFamily: 'system-ui, sans-serif'},
    ...option,
    // confine: no arrow under an item's tooltip (ECharts draws it as markup with a style attribute, which the CSP refuses).
    ...(option.tooltip ? {tooltip: {confine: true, ...option.tooltip}} : {}),
    toolbox: {right: 10, feature: {saveAsImage: {title: 'PNG', name: el.id, pixelRatio: 2}, ...(option.toolboxExtra || {})}},
  };
  delete o.toolboxExtra;
  const zoom = savedZoom.get(el.id);
  if (zoom && o.dataZoom) {
    const dz = Array.isArray(o.dataZoom) ? o.dataZoom : [o.dataZoom];
    o.dataZoom = dz.map((d, k) => (zoom[k] ? {...d, start: zoom[k].start, end: zoom[k].end} : d));
  }
  chart.setOption(o, true);
  return chart;
}

// Before a re-render: remember each chart's zoom window and let go of the old instances.
export function saveZoom(root) {
  savedZoom.clear();
  if (typeof window.echarts === 'undefined') return;  // no chart drawn yet
  for (const el of root.querySelectorAll('.chart')) {
    const chart = echarts.getInstanceByDom(el);
    if (!chart) continue;
    const dz = chart.getOption().dataZoom;
    if (dz && dz.length) savedZoom.set(el.id, dz.map((d) => ({start: d.start, end: d.end})));
  }
}

export function forgetZoom() {
  savedZoom.clear();
}

export function disposeAll() {
  for (const chart of instances) {
    if (!chart.isDisposed()) chart.dispose();
  }
  instances.clear();
}

window.addEventListener('resize', () => {
  for (const chart of instances) {
    if (!chart.isDisposed()) chart.resize();
  }
});

// A value axis that is log when every value is positive and they span more than 3 decades.
export function valueAxisFor(values, name) {
  const v = values.filter((x) => x !== null && Number.isFinite(x));
  const log = v.length > 1 && v.every((x) => x > 0) && Math.max(...v) / Math.min(...v) > 1000;
  return {type: log ? 'log' : 'value', name, scale: true, nameLocation: 'middle', nameGap: 45};
}

export const zoomXY = [
  {type: 'inside', xAxisIndex: 0, filterMode: 'none'},
  {type: 'slider', xAxisIndex: 0, filterMode: 'none', height: 18, bottom: 6},
  {type: 'inside', yAxisIndex: 0, filterMode: 'none'},
];
