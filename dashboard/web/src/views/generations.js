// #/c/i/generations — the objective's distribution per generation (genetic, evolution, PBT) as
// box plots (min, q1, median, q3, max), with the mean.
import {h, fmt, figure, section, note, table, trialLink} from '../dom.js';
import {chartDiv, draw, tip} from '../charts.js';

export default async function generations(ctx) {
  const stage = ctx.query.get('stage');
  const d = await ctx.api(`/api/campaigns/${ctx.i}/generations${stage ? `?stage=${encodeURIComponent(stage)}` : ''}`);
  const gens = d.generations || [];
  const chartEl = chartDiv('generations');
  const columns = [
    {label: 'generation', cell: (g) => String(g.generation)},
    {label: 'n', cell: (g) => String(g.n)},
    ...['min', 'q1', 'median', 'q3', 'max', 'mean'].map((k) => ({label: k, cell: (g) => fmt(g[k])})),
    {label: 'best trial', cell: (g) => (g.best_trial ? trialLink(ctx.i, g.best_trial) : '—'), csv: (g) => String(g.best_trial ?? '')},
  ];
  const sec = section('generations', 'Generations',
    h('p', {}, figure('generations', gens.length), ` generations · objective ${d.objective ?? ''} (${d.mode ?? ''})`),
    gens.length ? chartEl : note('This campaign has no generations (every trial is in generation 0).'),
    table('generations-table', columns, gens));
  ctx.mount(sec);
  if (gens.length) {
    draw(chartEl, {
      legend: {top: 4, left: 10, data: ['distribution', 'mean']},
      grid: {left: 70, right: 30, top: 40, bottom: 50},
      tooltip: {trigger: 'item', formatter: tip((q) => {
        const g = gens[q.dataIndex];
        if (q.seriesName === 'mean') return `generation ${g.generation}\nmean ${fmt(g.mean)}`;
        return `generation ${g.generation} (n = ${g.n})\nmax ${fmt(g.max)}\nq3 ${fmt(g.q3)}\nmedian ${fmt(g.median)}\nq1 ${fmt(g.q1)}\nmin ${fmt(g.min)}`;
      })},
      xAxis: {type: 'category', name: 'generation', nameLocation: 'middle', nameGap: 28, data: gens.map((g) => String(g.generation))},
      yAxis: {type: 'value', name: d.objective ?? 'objective', scale: true, nameLocation: 'middle', nameGap: 50},
      series: [
        {name: 'distribution', type: 'boxplot', data: gens.map((g) => [g.min, g.q1, g.median, g.q3, g.max])},
        {name: 'mean', type: 'scatter', symbol: 'diamond', symbolSize: 9, data: gens.map((g) => g.mean), itemStyle: {color: '#c9475c'}},
      ],
    });
  }
  return sec;
}
