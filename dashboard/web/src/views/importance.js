// #/c/i/importance — how much each parameter matters to the objective, computed on the server
// (the method is named), as a bar per parameter, largest first.
import {h, fmt, figure, section, note, table} from '../dom.js';
import {chartDiv, draw, tip} from '../charts.js';

export default async function importance(ctx) {
  const stage = ctx.query.get('stage');
  const d = await ctx.api(`/api/campaigns/${ctx.i}/importance${stage ? `?stage=${encodeURIComponent(stage)}` : ''}`);
  const imp = d.importances || [];
  const chartEl = chartDiv('importance');
  chartEl.style.height = `${Math.max(200, imp.length * 34 + 80)}px`;
  const sec = section('importance', 'Parameter importance',
    h('p', {}, 'Method: ', figure('importance-method', null, d.method ?? ''), ` · over ${d.n_trials ?? 0} trials`),
    d.note ? note(d.note) : null,
    chartEl,
    table('importance-table', [{label: 'parameter', cell: (r) => r.param}, {label: 'importance', cell: (r) => fmt(r.importance)}], imp));
  ctx.mount(sec);
  const rev = [...imp].reverse();  // the largest at the top
  draw(chartEl, {
    grid: {left: 140, right: 40, top: 30, bottom: 40},
    tooltip: {trigger: 'item', formatter: tip((q) => `${rev[q.dataIndex].param}: ${fmt(rev[q.dataIndex].importance)}`)},
    xAxis: {type: 'value', name: 'importance', min: 0, nameLocation: 'middle', nameGap: 26},
    yAxis: {type: 'category', data: rev.map((r) => r.param)},
    series: [{type: 'bar', data: rev.map((r) => r.importance), label: {show: true, position: 'right', formatter: (q) => fmt(q.value)}}],
  });
  return sec;
}
