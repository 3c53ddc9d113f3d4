// #/c/i/curves — learning curves: a metric's intermediate values per trial against the step, the
// running trials included (drawn live), pruned trials dashed with a cross at their last report,
// the best trials thicker.
import {h, fmt, figure, section, note, table, trialLink, stateBadge} from '../dom.js';
import {chartDiv, draw, tip, zoomXY, palette} from '../charts.js';

const metricOf = new Map();  // per campaign

export default async function curves(ctx) {
  const metric = metricOf.get(ctx.i);
  const d = await ctx.api(`/api/campaigns/${ctx.i}/curves${metric ? `?metric=${encodeURIComponent(metric)}` : ''}`);
  const ts = d.trials || [];
  const select = h('select', {id: 'curves-metric'}, (d.metrics || []).map((m) => h('option', {value: m}, m)));
  select.value = d.metric ?? '';
  select.addEventListener('change', () => {
    metricOf.set(ctx.i, select.value);
    ctx.rerender();
  });
  const chartEl = chartDiv('curves', 'tall');
  const columns = [
    {label: 'trial', cell: (t) => trialLink(ctx.i, t.trial), csv: (t) => String(t.trial)},
    {label: 'state', cell: (t) => stateBadge(t.state), csv: (t) => t.state},
    {label: 'pruned', cell: (t) => (t.pruned ? 'yes' : '')},
    {label: 'best', cell: (t) => (t.best ? 'yes' : '')},
    {label: 'reports', cell: (t) => String((t.steps || []).length)},
    {label: 'last step', cell: (t) => fmt(t.steps && t.steps.length ? t.steps[t.steps.length - 1] : null)},
    {label: 'last value', cell: (t) => fmt(t.values && t.values.length ? t.values[t.values.length - 1] : null)},
  ];
  const sec = section('curves', 'Learning curves',
    h('div', {class: 'toolbar'}, h('label', {}, 'metric ', select),
      h('span', {}, figure('curves-trials', ts.length), ' trials · running ones included · pruned dashed with ✕ · best thicker')),
    ts.length ? null : note('No intermediate values reported yet.'),
    chartEl,
    table('curves-table', columns, ts, {rowData: (t) => ({trial: String(t.trial)})}));
  ctx.mount(sec);
  const series = ts.map((t, k) => {
    const color = t.state === 'running' ? '#3b6fd6' : t.pruned ? '#e0a039' : t.best ? '#c9475c' : palette[k % palette.length];
    const data = (t.steps || []).map((s, j) => [s, t.values[j]]);
    const last = data[data.length - 1];
    return {
      name: `#${t.trial}`, type: 'line', showSymbol: false, data, z: t.best ? 5 : t.state === 'running' ? 4 : 2,
      lineStyle: {width: t.best ? 3 : t.state === 'running' ? 2 : 1.2, type: t.pruned ? 'dashed' : 'solid', color,
                  opacity: t.best || t.state === 'running' ? 1 : 0.7},
      itemStyle: {color},
      markPoint: t.pruned && last ? {symbol: 'path://M0,0L10,10M10,0L0,10', symbolSize: 9, silent: true,
                                     itemStyle: {borderColor: color, borderWidth: 2, color: 'none'}, label: {show: false},
                                     data: [{coord: last}]} : undefined,
      trial: t,
    };
  });
  draw(chartEl, {
    grid: {left: 70, right: 30, top: 40, bottom: 70},
    legend: ts.length <= 20 ? {type: 'scroll', top: 4, left: 10, right: 60} : undefined,
    tooltip: {trigger: 'item', formatter: tip((q) => {
      const t = ts[q.seriesIndex];
      return `trial #${t.trial} (${t.state}${t.pruned ? ', pruned' : ''}${t.best ? ', best' : ''})\nstep ${fmt(q.value[0])}: ${fmt(q.value[1])}`;
    })},
    xAxis: {type: 'value', name: 'step', nameLocation: 'middle', nameGap: 28, scale: true},
    yAxis: {type: 'value', name: d.metric ?? '', scale: true, nameLocation: 'middle', nameGap: 50},
    dataZoom: zoomXY,
    series: series.map(({trial, ...s}) => s),
  });
  return sec;
}
