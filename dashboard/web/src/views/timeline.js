// #/c/i/timeline — a Gantt chart of trials on trainer groups over time (an ECharts custom series:
// one bar per attempt, coloured by state; running ones drawn to now), and each group's
// utilization in percent.
import {h, fmt, figure, section, note, table, duration} from '../dom.js';
import {chartDiv, draw, tip, stateColor} from '../charts.js';

export default async function timeline(ctx) {
  const d = await ctx.api(`/api/campaigns/${ctx.i}/timeline`);
  const groups = d.groups || [];
  const bars = d.bars || [];
  // A running bar is drawn to the span's end (the server's now), or this browser's now without one.
  const now = d.span && d.span[1] ? d.span[1] : Date.now() / 1000;
  const groupIds = [...new Set([...groups.map((g) => g.id), ...bars.map((b) => b.group)])].sort((a, b) => a - b);
  const row = new Map(groupIds.map((g, k) => [g, k]));
  const chartEl = chartDiv('timeline');
  chartEl.style.height = `${Math.min(900, Math.max(240, groupIds.length * 26 + 110))}px`;
  const sec = section('timeline', 'Trainer groups over time',
    h('p', {}, 'utilization ', figure('utilization', d.utilization ?? null, d.utilization === null || d.utilization === undefined ? '—' : d.utilization.toFixed(1)), ' % over ', duration(d.span ? d.span[1] - d.span[0] : null),
      ` · ${groupIds.length} groups · ${bars.length} bars`, d.truncated ? ' (the latest only)' : ''),
    bars.length ? chartEl : note('No trial has started yet.'),
    table('timeline-groups', [
      {label: 'group', cell: (g) => String(g.id)},
      {label: 'backend', cell: (g) => g.backend ?? ''},
      {label: 'hosts', cell: (g) => (Array.isArray(g.hosts) ? g.hosts.join(' ') : String(g.hosts ?? ''))},
      {label: 'busy', cell: (g) => duration(g.busy_s), csv: (g) => fmt(g.busy_s)},
      {label: 'utilization %', cell: (g) => fmt(g.utilization)},
    ], groups));
  ctx.mount(sec);
  if (!bars.length) return sec;
  const data = bars.map((b) => ({
    value: [row.get(b.group), b.start * 1000, (b.end ?? now) * 1000, b.trial, b.attempt, b.end === null || b.end === undefined ? 1 : 0],
    itemStyle: {color: stateColor[b.state] || '#7f8c8d'}, state: b.state, devices: b.devices || '',
  }));
  draw(chartEl, {
    grid: {left: 80, right: 30, top: 30, bottom: 60},
    tooltip: {trigger: 'item', formatter: tip((q) => {
      const [, s, e, trialId, attempt, running] = q.value;
      const gpus = q.data.devices ? ` · GPU ${q.data.devices}` : '';
      return `trial #${trialId} attempt ${attempt}\ngroup ${groupIds[q.value[0]]}${gpus} · ${q.data.state}\n${duration((e - s) / 1000)}${running ? ' (running)' : ''}`;
    })},
    xAxis: {type: 'time', name: 'time', nameLocation: 'middle', nameGap: 28, scale: true,
            min: d.span ? d.span[0] * 1000 : undefined, max: d.span ? d.span[1] * 1000 : undefined},
    yAxis: {type: 'category', data: groupIds.map((g) => `group ${g}`), inverse: true},
    dataZoom: [{type: 'inside', xAxisIndex: 0, filterMode: 'weakFilter'}, {type: 'slider', xAxisIndex: 0, filterMode: 'weakFilter', height: 18, bottom: 6}],
    series: [{
      type: 'custom', encode: {x: [1, 2], y: 0}, data,
      renderItem: (params, api) => {
        const y = api.value(0);
        const start = api.coord([api.value(1), y]);
        const end = api.coord([api.value(2), y]);
        const height = api.size([0, 1])[1] * 0.7;
        const rect = echarts.graphic.clipRectByRect(
          {x: start[0], y: start[1] - height / 2, width: Math.max(1, end[0] - start[0]), height},
          {x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width, height: params.coordSys.height});
        return rect && {type: 'rect', transition: ['shape'], shape: rect, style: api.style({stroke: '#fff', lineWidth: 0.5})};
      },
    }],
  });
  return sec;
}
