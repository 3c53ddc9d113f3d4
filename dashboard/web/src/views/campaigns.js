// #/ — every served campaign: name, state, algorithm, trials by state, best, elapsed; tick several
// and Compare draws their best-so-far side by side (#/compare?c=0,1).
import {h, fmt, duration, table, section, stateBadge, link, trialLink} from '../dom.js';
import {rememberCampaigns} from '../app.js';

export function byStateText(byState) {
  return Object.entries(byState || {}).filter(([, n]) => n > 0).map(([s, n]) => `${s} ${n}`).join(' · ') || '—';
}

export default async function campaigns(ctx) {
  const data = await ctx.api('/api/campaigns');
  const list = data.campaigns || [];
  rememberCampaigns(list);
  const selected = new Set();
  const compareButton = h('button', {id: 'compare', type: 'button', disabled: true,
                                     onclick: () => { location.hash = `#/compare?c=${[...selected].sort((a, b) => a - b).join(',')}`; }},
                          'Compare selected');
  const columns = [
    {label: '', cell: (c) => h('input', {type: 'checkbox', dataset: {compare: String(c.index)}, title: 'compare',
                                         onchange: (e) => {
                                           if (e.target.checked) selected.add(c.index); else selected.delete(c.index);
                                           compareButton.disabled = selected.size === 0;
                                         }}), csv: () => ''},
    {label: '#', cell: (c) => String(c.index)},
    {label: 'name', cell: (c) => (c.error ? h('span', {class: 'bad'}, c.name ?? c.file) : link(`#/c/${c.index}`, c.name ?? c.file)),
     csv: (c) => c.name ?? c.file},
    {label: 'file', cell: (c) => c.file ?? ''},
    {label: 'state', cell: (c) => (c.state ? stateBadge(c.state) : '—'), csv: (c) => c.state ?? ''},
    {label: 'algorithm', cell: (c) => c.algorithm ?? '—'},
    {label: 'trials', cell: (c) => (c.trials ? String(c.trials.total) : '—')},
    {label: 'by state', cell: (c) => byStateText(c.trials && c.trials.by_state)},
    {label: 'best', cell: (c) => (c.best ? [fmt(c.best.objective), ' ', h('span', {class: 'muted'}, '(', trialLink(c.index, c.best.trial), ')')] : '—'),
     csv: (c) => (c.best ? fmt(c.best.objective) : '')},
    {label: 'elapsed', cell: (c) => duration(c.elapsed_s), csv: (c) => fmt(c.elapsed_s)},
    {label: 'error', cell: (c) => c.error ?? ''},
  ];
  const sec = section('campaigns', 'Campaigns',
                      table('campaigns-table', columns, list, {rowData: (c) => ({index: String(c.index)}),
                                                               tools: compareButton, filename: 'campaigns.csv'}));
  ctx.mount(sec);
  return sec;
}
