// #/compare?c=0,1 — the best-so-far of several campaigns against the trial number, one series each
// (named by campaign), and their figures side by side.
import {h, fmt, duration, table, section, stateBadge, link, note} from '../dom.js';
import {chartDiv, draw, tip, zoomXY} from '../charts.js';
import {rememberCampaigns} from '../app.js';
import {byStateText} from './campaigns.js';

export default async function compare(ctx) {
  const wanted = (ctx.query.get('c') || '').split(',').filter((s) => /^\d+$/.test(s)).map(Number);
  const data = await ctx.api('/api/campaigns');
  rememberCampaigns(data.campaigns || []);
  const list = (data.campaigns || []).filter((c) => wanted.includes(c.index));
  const histories = await Promise.all(list.map((c) => ctx.api(`/api/campaigns/${c.index}/history`).catch((e) => ({error: e.message}))));
  const columns = [
    {label: '#', cell: (c) => String(c.index)},
    {label: 'name', cell: (c) => link(`#/c/${c.index}`, c.name ?? c.file), csv: (c) => c.name ?? c.file},
    {label: 'state', cell: (c) => stateBadge(c.state ?? '—'), csv: (c) => c.state ?? ''},
    {label: 'algorithm', cell: (c) => c.algorithm ?? '—'},
    {label: 'objective', cell: (c) => (c.objectives || []).map((o) => `${o.metric} (${o.mode})`).join(', ')},
    {label: 'trials', cell: (c) => byStateText(c.trials && c.trials.by_state)},
    {label: 'best', cell: (c) => (c.best ? fmt(c.best.objective) : '—')},
    {label: 'elapsed', cell: (c) => duration(c.elapsed_s), csv: (c) => fmt(c.elapsed_s)},
  ];
  const chartEl = chartDiv('compare');
  const sec = section('compare', 'Compare campaigns',
                      list.length ? null : note('Select campaigns on the list first.'),
                      chartEl, table('compare-table', columns, list, {rowData: (c) => ({index: String(c.index)})}));
  ctx.mount(sec);
  const series = list.map((c, k) => {
    const p = histories[k].points || {number: [], best: []};
    return {name: `${c.name ?? c.file} (#${c.index})`, type: 'line', step: 'end', showSymbol: false,
            data: p.number.map((n, j) => [n, p.best[j]])};
  });
  draw(chartEl, {
    title: {text: 'Best so far', left: 10, textStyle: {fontSize: 14}},
    legend: {top: 26, type: 'scroll'},
    grid: {left: 70, right: 30, top: 60, bottom: 60},
    tooltip: {trigger: 'axis', formatter: tip((ps) => [`trial ${ps[0].value[0]}`, ...ps.map((p) => `${p.seriesName}: ${fmt(p.value[1])}`)].join('\n'))},
    xAxis: {type: 'value', name: 'trial number', nameLocation: 'middle', nameGap: 28, min: 1},
    yAxis: {type: 'value', name: 'best objective', scale: true, nameLocation: 'middle', nameGap: 50},
    dataZoom: zoomXY,
    series,
  });
  return sec;
}
