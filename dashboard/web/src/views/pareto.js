// #/c/i/pareto — the Pareto front of a multi-objective campaign: every trial's objectives (the
// first two as x and y, a third as colour), the front highlighted and joined.
import {h, fmt, figure, section, note, table, trialLink} from '../dom.js';
import {chartDiv, draw, tip, zoomXY} from '../charts.js';

export default async function pareto(ctx) {
  const d = await ctx.api(`/api/campaigns/${ctx.i}/pareto`);
  const objs = d.objectives || [];
  const pts = d.points || [];
  const front = d.front || [];
  const chartEl = chartDiv('pareto', 'tall');
  const onFront = pts.filter((p) => p.on_front);
  const columns = [
    {label: 'trial', cell: (p) => trialLink(ctx.i, p.trial), csv: (p) => String(p.trial)},
    ...objs.map((o, k) => ({label: `${o.metric} (${o.mode})`, cell: (p) => fmt(p.values[k])})),
  ];
  const sec = section('pareto', 'Pareto front',
    h('p', {}, figure('pareto-front', front.length), ' trials on the front of ', String(pts.length),
      ' · objectives ', objs.map((o) => `${o.metric} (${o.mode})`).join(', ')),
    d.note ? note(d.note) : null,
    objs.length >= 2 ? chartEl : null,
    objs.length >= 2 ? h('h2', {}, 'The front') : null,
    objs.length >= 2 ? table('pareto-table', columns, onFront, {rowData: (p) => ({trial: String(p.trial)})}) : null);
  ctx.mount(sec);
  if (objs.length < 2) return sec;
  const xy = (p) => [p.values[0], p.values[1], p.values[2] ?? null, p.trial];
  const line = [...onFront].sort((a, b) => a.values[0] - b.values[0]).map(xy);
  draw(chartEl, {
    legend: {top: 4, left: 10, data: ['trials', 'front']},
    grid: {left: 80, right: objs.length > 2 ? 110 : 30, top: 40, bottom: 70},
    tooltip: {trigger: 'item', formatter: tip((q) => `trial #${q.value[3]}\n` + objs.map((o, k) => `${o.metric} = ${fmt(q.value[k])}`).join('\n'))},
    xAxis: {type: 'value', scale: true, name: `${objs[0].metric} (${objs[0].mode})`, nameLocation: 'middle', nameGap: 28},
    yAxis: {type: 'value', scale: true, name: `${objs[1].metric} (${objs[1].mode})`, nameLocation: 'middle', nameGap: 55},
    visualMap: objs.length > 2 ? {type: 'continuous', dimension: 2, seriesIndex: 0, right: 0, top: 'center', calculable: true,
                                  min: Math.min(...pts.map((p) => p.values[2])), max: Math.max(...pts.map((p) => p.values[2])),
                                  text: [objs[2].metric, '']} : undefined,
    dataZoom: zoomXY,
    series: [
      {name: 'trials', type: 'scatter', symbolSize: 6, data: pts.filter((p) => !p.on_front).map(xy), itemStyle: {color: '#9aa5b1'}},
      {name: 'front', type: 'line', data: line, symbolSize: 9, step: false, itemStyle: {color: '#c9475c'}, lineStyle: {type: 'dashed'}},
    ],
  });
  return sec;
}
