// #/c/i/stages — the workflow's stages: their table; an ensemble's member weights against the best
// single model; a transfer's targets against their baselines; PBT's exploit/explore tree.
import {h, fmt, section, note, table, trialLink} from '../dom.js';
import {chartDiv, draw, tip} from '../charts.js';
import {stagesTable} from './overview.js';

function metricLine(obj) {
  return Object.entries(obj || {}).filter(([, v]) => typeof v === 'number').map(([k, v]) => `${k} ${fmt(v)}`).join(' · ');
}

// The PBT tree as ECharts tree data: roots are trials without a parent in the list.
function treeData(tree) {
  const nodes = new Map(tree.map((n) => [n.trial, {name: `#${n.trial}`, value: n.value, node: n, children: []}]));
  const roots = [];
  for (const n of tree) {
    const me = nodes.get(n.trial);
    if (n.parent !== null && n.parent !== undefined && nodes.has(n.parent)) nodes.get(n.parent).children.push(me);
    else roots.push(me);
  }
  return {name: 'population', children: roots};
}

export default async function stages(ctx) {
  const d = await ctx.api(`/api/campaigns/${ctx.i}/stages`);
  const list = d.stages || [];
  const parts = [stagesTable(ctx.i, list)];
  const draws = [];
  for (const s of list) {
    const v = s.view || {};
    if (s.kind === 'ensemble' && v.members) {
      const el = chartDiv('ensemble');
      parts.push(h('h2', {}, `Ensemble: ${s.name}`),
                 h('p', {}, 'ensemble: ', metricLine(v.ensemble) || '—', h('br'),
                   'best single: ', v.best_single && v.best_single.trial ? trialLink(ctx.i, v.best_single.trial) : '—', ' ',
                   // The member with the lowest validation loss (the loss the blend minimises), its objective beside.
                   v.best_single && v.best_single.chosen_by ? `(lowest ${v.best_single.chosen_by}) ` : '',
                   metricLine(v.best_single),
                   v.best_single && v.best_single.objective && v.best_single.objective.metric
                     ? ` · objective ${v.best_single.objective.metric} ${fmt(v.best_single.objective.value)}` : ''),
                 el,
                 table('ensemble-members', [
                   {label: 'trial', cell: (m) => trialLink(ctx.i, m.trial), csv: (m) => String(m.trial)},
                   {label: 'weight', cell: (m) => fmt(m.weight)},
                   {label: 'objective', cell: (m) => fmt(m.objective)},
                 ], v.members));
      draws.push(() => draw(el, {
        grid: {left: 70, right: 70, top: 64, bottom: 50},
        legend: {top: 4, left: 10},
        tooltip: {trigger: 'item', formatter: tip((q) => `${q.name}\n${q.seriesName}: ${fmt(q.value)}`)},
        xAxis: {type: 'category', data: [...v.members.map((m) => `#${m.trial}`), 'best single'], name: 'member', nameLocation: 'middle', nameGap: 28},
        yAxis: [{type: 'value', name: 'weight', min: 0}, {type: 'value', name: 'objective', scale: true}],
        series: [
          {name: 'weight', type: 'bar', data: [...v.members.map((m) => m.weight), null]},
          {name: 'objective', type: 'scatter', yAxisIndex: 1, symbolSize: 10,
           data: [...v.members.map((m) => m.objective), v.best_single && v.best_single.objective ? (v.best_single.objective.value ?? null) : null]},
        ],
      }));
    } else if (s.kind === 'transfer' && v.pairs) {
      const el = chartDiv('transfer');
      parts.push(h('h2', {}, `Transfer: ${s.name}`),
                 // One figure, named as `hpctune status` names it (the stage's compare_metric).
                 h('p', {}, `mean target ${v.label ?? 'value'} ${fmt(v.mean_target)} · mean baseline ${v.label ?? 'value'} ${fmt(v.mean_baseline)}`),
                 el,
                 table('transfer-pairs', [
                   {label: 'target', cell: (p) => trialLink(ctx.i, p.target), csv: (p) => String(p.target)},
                   {label: 'baseline', cell: (p) => trialLink(ctx.i, p.baseline), csv: (p) => String(p.baseline)},
                   {label: `target ${v.label ?? 'value'}`, cell: (p) => fmt(p.target_value)},
                   {label: `baseline ${v.label ?? 'value'}`, cell: (p) => fmt(p.baseline_value)},
                 ], v.pairs));
      draws.push(() => draw(el, {
        grid: {left: 70, right: 30, top: 40, bottom: 50},
        legend: {top: 4, left: 10},
        tooltip: {trigger: 'item', formatter: tip((q) => `${q.name}\n${q.seriesName}: ${fmt(q.value)}`)},
        xAxis: {type: 'category', data: v.pairs.map((p) => `#${p.target} vs #${p.baseline}`)},
        yAxis: {type: 'value', scale: true, name: v.label ?? ''},
        series: [{name: 'target', type: 'bar', data: v.pairs.map((p) => p.target_value)},
                 {name: 'baseline', type: 'bar', data: v.pairs.map((p) => p.baseline_value)}],
      }));
    } else if (s.kind === 'pbt' && v.tree) {
      const el = chartDiv('pbt', 'tall');
      parts.push(h('h2', {}, `PBT: ${s.name}`), note('Each child exploited its parent (copied its weights) and explored (perturbed its parameters).'), el);
      draws.push(() => draw(el, {
        tooltip: {trigger: 'item', formatter: tip((q) => (q.data.node ? `trial #${q.data.node.trial} (gen ${q.data.node.generation ?? '?'})\n` +
                                                                        `${q.data.node.relation ?? ''}\nvalue ${fmt(q.data.node.value)}` : q.name))},
        series: [{type: 'tree', data: [treeData(v.tree)], top: 30, left: 60, bottom: 30, right: 100, symbolSize: 8,
                  orient: 'LR', expandAndCollapse: true, initialTreeDepth: -1, label: {position: 'left', fontSize: 10},
                  leaves: {label: {position: 'right'}}}],
      }));
    }
  }
  const sec = section('stages', 'Stages', list.length ? null : note('This campaign has a single search stage.'), ...parts);
  ctx.mount(sec);
  for (const f of draws) f();
  return sec;
}
