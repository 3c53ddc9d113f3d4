// #/c/i/history — every trial's objective in finish order (scatter "value") with the best-so-far
// line ("best"), against the trial number or the time (#history-x).
import {h, fmt, figure, section, note, when} from '../dom.js';
import {chartDiv, draw, tip, zoomXY, valueAxisFor, stateColor} from '../charts.js';

const xMode = new Map();  // per campaign: 'number' | 'time'

export default async function history(ctx) {
  const stage = ctx.query.get('stage');
  const d = await ctx.api(`/api/campaigns/${ctx.i}/history${stage ? `?stage=${encodeURIComponent(stage)}` : ''}`);
  const p = d.points || {trial: [], number: [], finished_at: [], value: [], state: [], best: []};
  const n = p.trial.length;
  const chartEl = chartDiv('history');
  const select = h('select', {id: 'history-x', title: 'x axis'},
                   h('option', {value: 'number'}, 'trial number'), h('option', {value: 'time'}, 'time'));
  select.value = xMode.get(ctx.i) || 'number';
  const sec = section('history', 'Optimization history',
    h('div', {class: 'toolbar'},
      h('label', {}, 'x axis ', select),
      h('span', {}, `objective ${d.objective ?? ''} (${d.mode ?? ''}) · `, figure('history-points', d.shown ?? n), ' points',
        d.total !== undefined && d.total !== (d.shown ?? n) ? ` shown of ${d.total}` : '')),
    n ? null : note('No trial has an objective yet.'),
    chartEl);
  ctx.mount(sec);
  const plot = () => {
    const byTime = select.value === 'time';
    const x = (j) => (byTime ? p.finished_at[j] * 1000 : p.number[j]);
    const values = [], best = [];
    for (let j = 0; j < n; ++j) {
      values.push({value: [x(j), p.value[j], p.trial[j]], itemStyle: {color: stateColor[p.state[j]] || '#3b6fd6'}});
      best.push([x(j), p.best[j], p.trial[j]]);
    }
    draw(chartEl, {
      legend: {data: ['value', 'best'], top: 4, left: 10},
      grid: {left: 70, right: 30, top: 40, bottom: 70},
      tooltip: {trigger: 'item', formatter: tip((q) => `trial #${q.value[2]}\n${q.seriesName}: ${fmt(q.value[1])}\n` +
                                                      (byTime ? when(q.value[0] / 1000) : `number ${q.value[0]}`))},
      xAxis: byTime ? {type: 'time', name: 'finished at', nameLocation: 'middle', nameGap: 28}
                    : {type: 'value', name: 'trial number (finish order)', nameLocation: 'middle', nameGap: 28, min: 1},
      yAxis: valueAxisFor(p.value, d.objective ?? 'objective'),
      dataZoom: zoomXY,
      series: [
        {name: 'value', type: 'scatter', symbolSize: 6, data: values, large: n > 5000},
        {name: 'best', type: 'line', step: 'end', showSymbol: false, data: best, lineStyle: {width: 2, color: '#c9475c'},
         itemStyle: {color: '#c9475c'}},
      ],
    });
  };
  select.addEventListener('change', () => {
    xMode.set(ctx.i, select.value);
    plot();
  });
  plot();
  return sec;
}
