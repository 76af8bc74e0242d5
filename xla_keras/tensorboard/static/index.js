// The XLA tab: a plain ES module served by xla_keras's TensorBoard plugin. No build step, no
// network access beyond this TensorBoard: it fetches the plugin's JSON routes (relative to the
// <base href="plugin/xla_keras/"> TensorBoard gives the iframe) and lays out what they return.
// Every number is computed by the backend (xla_keras/tensorboard/views.py); this file formats.

const REFRESH_MS = Number(window.localStorage.getItem('xla_keras.refresh_ms')) || 30000;  // as TensorBoard reloads
const PHASES = ['train', 'test', 'predict'];
const state = {runs: null, selected: null, baseline: null, view: null, steps: null, sort: {key: 'index', dir: 1},
               profileTab: true, profileInstall: null, drawn: '', updated: null, error: null};

export async function render() {
  const css = document.createElement('link');
  css.rel = 'stylesheet';
  css.href = './static/style.css';
  document.head.appendChild(css);
  const root = el('div', {id: 'xla-root'});
  document.body.appendChild(root);
  await refresh(root);
  // A timer's tick waits for the refresh in flight: on a slow server (a response slower than the period)
  // each tick would supersede the last one and nothing would ever be drawn (a click's refresh neither).
  window.setInterval(() => { if (!inFlight) refresh(root); }, REFRESH_MS);
}

// ------------------------------------------------------------------ data

async function getJSON(url) {
  const response = await fetch(url);
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error((body && body.error) || `${url}: HTTP ${response.status}`);
  return body;
}

let latest = 0;  // a timer's refresh and a click's may overlap: only the newest one is drawn
let inFlight = 0;  // refreshes not yet answered

async function refresh(root) {
  const ticket = ++latest;
  inFlight += 1;
  try {
    await load(root, ticket);
  } finally {
    inFlight -= 1;
  }
}

async function load(root, ticket) {
  let loaded;
  try {
    const listing = await getJSON('./runs');
    let selected = state.selected;
    if (!listing.runs.some((r) => r.run === selected)) {
      const first = listing.runs.find((r) => !r.message) || listing.runs[0];
      selected = first ? first.run : null;
    }
    let view = null, steps = null;
    if (state.baseline !== null && !listing.runs.some((r) => r.run === state.baseline)) state.baseline = null;
    if (selected !== null) {
      const q = '?run=' + encodeURIComponent(selected);
      const against = state.baseline !== null && state.baseline !== selected ?
        '&baseline=' + encodeURIComponent(state.baseline) : '';
      [view, steps] = await Promise.all([getJSON('./report' + q + against), getJSON('./steps' + q)]);
    }
    loaded = {listing, selected, view, steps};
  } catch (error) {
    if (ticket !== latest) return;
    state.error = String(error.message || error);
  }
  if (ticket !== latest) return;
  if (loaded) {
    state.runs = loaded.listing.runs;
    state.profileTab = loaded.listing.profile_tab;
    state.profileInstall = loaded.listing.profile_install;
    state.selected = loaded.selected;
    state.view = loaded.view;
    state.steps = loaded.steps;
    state.error = null;
  }
  state.updated = new Date();
  const fingerprint = JSON.stringify([state.runs, state.selected, state.baseline, state.view, state.steps,
                                      state.sort, state.error]);
  if (fingerprint !== state.drawn) {  // a refresh with nothing new keeps the page (and a hover) as it is
    state.drawn = fingerprint;
    draw(root);
  }
  const stamp = root.querySelector('#updated');
  if (stamp) stamp.textContent = `updated ${state.updated.toLocaleTimeString()} · refreshes every ` +
                                 `${Math.round(REFRESH_MS / 1000)} s`;
}

async function select(root, run) {
  state.selected = run;
  await refresh(root);
}

async function setBaseline(root, run) {  // the ledger's signatures, new or gone against this run's
  state.baseline = state.baseline === run ? null : run;
  await refresh(root);
}

// ------------------------------------------------------------------ layout

function draw(root) {
  root.replaceChildren();
  root.appendChild(el('header', {}, [el('h1', {}, 'XLA'), el('span', {id: 'updated', class: 'muted'})]));
  if (state.error) root.appendChild(el('div', {class: 'message error', id: 'error'}, state.error));
  if (!state.runs) return;
  if (state.runs.length === 0) {
    root.appendChild(el('div', {class: 'message empty', id: 'empty'}, [
      'No xla_keras data under this logdir yet. Add ', el('code', {}, 'xla_keras.XlaMonitor(log_dir=...)'),
      ' to ', el('code', {}, 'model.fit(callbacks=[...])'),
      ' with this logdir (or a folder in it): the tab fills in at the monitor\'s first flush.']));
    return;
  }
  root.appendChild(compareView(root));
  const view = state.view;
  const detail = el('section', {id: 'run'});
  root.appendChild(detail);
  detail.appendChild(el('h2', {}, ['Run ', el('code', {}, state.selected)]));
  if (!view) return;
  if (view.message && !view.status) {
    detail.appendChild(el('div', {class: 'message', id: 'run-message'}, view.message));
    return;
  }
  for (const message of view.messages || []) detail.appendChild(el('div', {class: 'message'}, message));
  // What to act on first (what XLA did not compile, storms, advice), then the run's numbers, then
  // the ledger.
  if (view.status.jit_fix || view.status.unsupported_ops) detail.appendChild(notCompiledCard(view.status));
  if (view.status.coverage) detail.appendChild(coverageCard(view.status.coverage));
  detail.appendChild(stormCards(view.storms));
  if ((view.advice || []).length) detail.appendChild(budgetCards(view.advice));
  detail.appendChild(statusStrip(view.status));
  if (view.jit_decision) detail.appendChild(decisionCard(view.jit_decision));
  detail.appendChild(timeline(view, state.steps));
  detail.appendChild(ledgerTable(root, view));
  detail.appendChild(traceLinks(view.traces));
  if (view.notes.length) {
    detail.appendChild(el('section', {id: 'notes'}, [el('h3', {}, 'Notes'),
      el('ul', {}, view.notes.map((n) => el('li', {}, n)))]));
  }
}

function compareView(root) {
  const head = ['run', 'jit requested', 'XLA active', 'compiles (train / test / predict)', 'compile time',
                'wall time', 'steady step', 'break-even', 'storms', 'baseline'];
  const rows = state.runs.map((r) => {
    const cells = r.message ?
      [el('td', {colspan: String(head.length - 2), class: 'muted'}, r.message)] :
      [td(r.jit_mode), td(active(r.jit_active)),
       td(PHASES.map((p) => r.compilation_count[p]).join(' / '), {'data-total': r.total_compilations}),
       td(r.total_compilations ? seconds(r.compile_seconds) : 'none', {'data-seconds': r.compile_seconds}),
       td(seconds(r.wall_seconds)), td(steadyValue(r), {'data-seconds': r.steady_step_seconds}),
       td(typeof r.break_even_steps === 'number' ? `${Math.round(r.break_even_steps)} steps` : '—'),
       td(String(r.storms))];
    const pick = el('button', {class: 'baseline' + (r.run === state.baseline ? ' on' : ''),
                               title: 'compare the selected run\'s compile ledger against this run'},
                    r.run === state.baseline ? 'baseline ✓' : 'baseline');
    pick.addEventListener('click', (event) => { event.stopPropagation(); setBaseline(root, r.run); });
    const row = el('tr', {'data-run': r.run, class: r.run === state.selected ? 'selected' : ''},
                   [el('td', {}, el('code', {}, r.run)), ...cells, el('td', {}, pick)]);
    row.addEventListener('click', () => select(root, r.run));
    return row;
  });
  return el('section', {id: 'compare'}, [
    el('h3', {}, state.runs.length > 1 ? `Runs side by side (${state.runs.length})` : 'Run'),
    el('table', {}, [el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))), el('tbody', {}, rows)])]);
}

function statusStrip(s) {
  const counts = PHASES.map((p) => `${p} ${s.compilation_count[p]}`).join(' · ');
  const signatures = PHASES.map((p) => `${p} ${(s.distinct_signatures || {})[p] || 0}`).join(' · ');
  const share = s.compile_share === null ? '' : ` (${(100 * s.compile_share).toFixed(1)}%)`;
  const backend = s.backend === 'jax' ? 'JAX' : 'TensorFlow';
  const other = Object.entries(s.other_compilations || {})
    .map(([where, v]) => `${v.count} ${where.replace('_', ' ')} (${seconds(v.seconds)})`).join(' · ');
  // modules of TensorFlow's one-off variable initialiser: in the counts above, not the step's program
  const outside = Object.entries(s.outside_step_compilations || {})
    .map(([phase, v]) => `${phase} ${v.count} (${seconds(v.seconds)})`).join(' · ');
  const breakEven = s.break_even_steps === null ?
    'unknown: no non-XLA baseline here (compare() measures one)' : `${Math.round(s.break_even_steps)} steps`;
  return el('section', {id: 'status', class: 'strip'}, [
    card('JIT', `${backend} · requested ${s.jit_mode} · XLA ${active(s.jit_active)}`, s.jit_reason, 'jit'),
    card('Compiles', `${s.total_compilations}: ${counts}`, `distinct signatures: ${signatures}` +
         (other ? ` · not step programs: ${other}` : '') +
         (outside ? ` · outside the step's program (a one-off initialiser): ${outside}` : '') +
         (s.processes_words ? ` · processes: ${s.processes_words}` : '') +
         (s.precompile_words ? ` · precompiled: ${s.precompile_words}` : ''), 'compiles'),
    card('Compile time', s.compile_time_words || `${seconds(s.compile_seconds)} of ${seconds(s.wall_seconds)} wall${share}`,
         s.cache_saved_seconds ? `the persistent cache saved ${seconds(s.cache_saved_seconds)}` :
           `seconds measured by: ${s.probe}`, 'compile-time'),
    card('Steady step', steadyValue(s), PHASES.filter((p) => (s.steady_words || {})[p])
      .map((p) => `${p} ${s.steady_words[p]}`).join(' · '), 'steady'),
    card('Break-even', s.break_even_words || breakEven,
         s.fallback ? `fallback: ${s.fallback.reason}${s.fallback_words ? '; ' + s.fallback_words : ''}` : '',
         'break-even'),
    s.cost_words ? card('Cost', s.cost_words.split(/; (?=(?:train|test|predict) )/)[0], s.cost_words, 'cost') :
      el('span'),
  ]);
}

// The train phase's steady step as a figure: "withheld" while it cannot be known (the reason is in the
// card's detail), and an old JAX report's dispatch time never shown as a step time.
function steadyValue(s) {
  if (s.steady_step_seconds === null && s.steady_withheld) return 'withheld';
  if (s.steady_basis === 'dispatch') return `${ms(s.steady_step_seconds)} (dispatch time)`;
  return ms(s.steady_step_seconds);
}

function card(title, value, detail, id) {
  return el('div', {class: 'card', id: 'status-' + id},
            [el('div', {class: 'card-title'}, title), el('div', {class: 'card-value'}, value),
             el('div', {class: 'card-detail muted'}, detail || '')]);
}

// ------------------------------------------------------------------ timeline

const SVG = 'http://www.w3.org/2000/svg';

function timeline(view, steps) {
  const section = el('section', {id: 'timeline'}, [el('h3', {}, 'Timeline'),
    el('div', {class: 'muted'}, 'Step time per phase on its step axis (test steps count over the ' +
       'monitor\'s lifetime), each ledger row (a signature\'s modules) marked at its step. Hover a mark for its ' +
       'signature, modules and seconds.'),
    el('div', {class: 'legend'}, [
      el('span', {class: 'key step-key'}), 'step time (ms)', el('span', {class: 'key steady-key'}),
      'steady median', el('span', {class: 'key profiler-key'}), 'compile, seconds measured (profiler / op span)',
      el('span', {class: 'key timing-key'}), 'compile, seconds estimated from step time'])]);
  const tooltip = el('div', {class: 'tooltip', id: 'tooltip', hidden: ''});
  section.appendChild(tooltip);
  const lanes = (steps && steps.lanes) || {};
  for (const phase of PHASES) {
    const marks = view.ledger.filter((row) => row.phase === phase);
    const series = (lanes[phase] || {}).step_time_ms || [];
    const lastStep = Math.max(view.status.steps[phase] || 0, ...marks.map((m) => m.step || 0),
                              ...series.map((p) => p[0]));
    if (!lastStep) continue;
    section.appendChild(lane(phase, marks, series, lastStep, tooltip));
  }
  return section;
}

function lane(phase, marks, series, lastStep, tooltip) {
  const width = 960, height = 130, left = 56, right = 12, top = 22, bottom = 22;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('class', 'lane');
  svg.setAttribute('data-phase', phase);
  const x = (step) => left + (width - left - right) * (lastStep <= 1 ? 0.5 : (step - 1) / (lastStep - 1));
  const steady = lanesSteady(phase);
  const values = series.map((p) => p[1]).concat(steady.map((p) => p[1]));
  const yMax = values.length ? Math.max(...values) : 1;
  const y = (v) => height - bottom - (height - top - bottom - 10) * (yMax ? v / yMax : 0);
  svg.appendChild(svgEl('text', {x: 4, y: 14, class: 'lane-title'}, phase));
  svg.appendChild(svgEl('line', {x1: left, x2: width - right, y1: height - bottom, y2: height - bottom,
                                 class: 'axis'}));
  svg.appendChild(svgEl('text', {x: left, y: height - 6, class: 'tick'}, 'step 1'));
  svg.appendChild(svgEl('text', {x: width - right, y: height - 6, class: 'tick end'}, `step ${lastStep}`));
  if (values.length) {
    svg.appendChild(svgEl('text', {x: left - 4, y: y(yMax) + 4, class: 'tick end'}, `${yMax.toPrecision(3)} ms`));
    const path = (points) => points.map((p, i) => `${i ? 'L' : 'M'}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`)
      .join(' ');
    if (steady.length) svg.appendChild(svgEl('path', {d: path(steady), class: 'steady-line'}));
    if (series.length) svg.appendChild(svgEl('path', {d: path(series), class: 'step-line'}));
    if (series.length <= 60) {  // few points (update_freq="epoch"): a line alone may not show them
      for (const p of series) svg.appendChild(svgEl('circle', {cx: x(p[0]), cy: y(p[1]), r: 2.5, class: 'step-dot'}));
    }
  } else {
    svg.appendChild(svgEl('text', {x: left + 8, y: height / 2, class: 'tick'},
                          'no step-time scalars for this phase (only compiles)'));
  }
  for (const mark of marks) {
    const node = svgEl('rect', {x: x(mark.step) - 2, y: top - 8, width: 4, height: height - top - bottom + 8,
                                class: 'compile-mark ' + mark.source, 'data-index': mark.index,
                                'data-step': mark.step, 'data-seconds': mark.seconds});
    node.addEventListener('mouseenter', (event) => {
      tooltip.replaceChildren(
        el('div', {}, `${mark.phase} ${mark.steps} · ${mark.modules_words} · ${seconds(mark.seconds)} ` +
                      `(${mark.source}${mark.cached ? ', cached' : ''})`),
        el('div', {}, mark.changed + (mark.cause ? ` · ${mark.cause}` : '')), el('code', {}, mark.signature));
      tooltip.hidden = false;
      const box = tooltip.parentNode.getBoundingClientRect();  // the tooltip sits in #timeline
      tooltip.style.left = `${event.clientX - box.left + 14}px`;
      tooltip.style.top = `${event.clientY - box.top + 14}px`;
    });
    node.addEventListener('mouseleave', () => { tooltip.hidden = true; });
    svg.appendChild(node);
  }
  return svg;
}

function lanesSteady(phase) {
  const lanes = (state.steps && state.steps.lanes) || {};
  return (lanes[phase] || {}).steady_step_time_ms || [];
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// ------------------------------------------------------------------ ledger, storms, traces

// One row per group of compiles (views.ledger: a signature's modules of one call, a run of compiles at a
// known signature with one cause, a one-off program's modules), with its count of modules and its cause.
const LEDGER_COLUMNS = [['index', '#'], ['phase', 'phase'], ['step', 'step'], ['modules', 'modules'],
                        ['seconds', 'seconds'], ['source', 'source'], ['cached', 'cached'],
                        ['changed', 'changed since the previous distinct signature'], ['cause', 'cause'],
                        ['flops', 'FLOPs'], ['peak_bytes', 'peak memory'], ['signature', 'signature']];

function ledgerTable(root, view) {
  const {key, dir} = state.sort;
  const rows = [...view.ledger].sort((a, b) => dir * compare(a[key], b[key]) || a.index - b.index);
  const head = LEDGER_COLUMNS.map(([k, label]) => {
    const th = el('th', {'data-key': k, class: 'sortable' + (k === key ? (dir > 0 ? ' up' : ' down') : '')}, label);
    th.addEventListener('click', () => {
      state.sort = {key: k, dir: k === key ? -dir : 1};
      draw(root);
      state.drawn = '';
    });
    return th;
  });
  const against = view.baseline && !view.baseline.message ? view.baseline : null;
  const fresh = new Set(against ? against.new : []);
  const body = rows.map((r) => el('tr', {'data-index': r.index,
                                         class: [fresh.has(r.index) ? 'new' : '', r.precompiled ? 'precompiled' : '']
                                           .filter(Boolean).join(' ')}, [
    td(String(r.index)), td(r.phase),
    r.precompiled ? td('precompiled', {class: 'precompiled', title: 'compiled before step 1 (XlaMonitor(precompile=...))'}) :
      td(r.step === r.last_step ? String(r.step) : `${r.step}–${r.last_step}`),
    td(r.modules_words, {class: 'modules', 'data-modules': r.modules}),
    td(seconds(r.seconds), {'data-seconds': r.seconds}),
    td(r.source), td(r.cached === null ? 'unknown' : r.cached ? 'yes' : 'no'), td(r.changed, {class: 'changed'}),
    td(r.cause, {class: 'cause'}),
    td(quantity(r.flops, 'FLOP'), {class: 'flops', title: r.cost_note}),
    td(quantity(r.peak_bytes, 'B'), {class: 'peak-bytes', title: r.cost_note}),
    el('td', {}, [el('code', {}, r.signature), fresh.has(r.index) ? el('span', {class: 'tag'}, ' new') : el('span')])]));
  const dropped = view.status.compilations_dropped;
  const versus = !view.baseline ? el('span') : view.baseline.message ?
    el('div', {class: 'message', id: 'baseline'}, `baseline ${view.baseline.run}: ${view.baseline.message}`) :
    el('div', {id: 'baseline'}, [
      el('div', {class: 'muted'}, `Against baseline ${against.run}: ${against.new.length} signature(s) new ` +
                                  `(marked), ${against.gone.length} gone`),
      el('ul', {id: 'baseline-gone'}, against.gone.map((g) => el('li', {}, [`${g.phase}: gone `,
                                                                            el('code', {}, g.signature)])))]);
  return el('section', {id: 'ledger'}, [
    el('h3', {}, `Compile ledger (${view.status.total_compilations})`),
    versus,
    el('table', {}, [el('thead', {}, el('tr', {}, head)), el('tbody', {}, body)]),
    dropped ? el('div', {class: 'message', id: 'overflow'},
                 `… and ${dropped} more compiles not listed (past max_records); the counts above include them.`) :
      el('span')]);
}

// What XLA did not compile: the reason (a layer Keras refuses to compile) and the code that lifts it.
function notCompiledCard(s) {
  const found = s.unsupported_ops;
  const children = [
    el('div', {class: 'headline'}, found
      ? `XLA could not compile ${unsupportedOps(found)} (${found.device}) at ${found.phase} step ${found.step}: ` +
        (found.action === 'fallback' ? 'the run went on without XLA, no step lost' : 'the run stopped')
      : `XLA ${active(s.jit_active)}: the model runs without XLA`),
    el('p', {class: 'cause'}, s.jit_reason)];
  if (found && found.line) children.push(el('p', {class: 'line'}, `Your line: ${found.line}`));
  if (found) children.push(el('p', {class: 'error muted'}, found.error));
  if (s.jit_fix) {
    const moves = s.jit_fix.includes('dataset.map');
    children.push(codeBlock(moves ? 'Fix: move the layer into the input pipeline' : 'Fix: compile the rest of the step',
                            s.jit_fix));
  }
  return el('section', {id: 'not-compiled'}, [el('h3', {}, 'What XLA did not compile'),
    el('div', {class: 'not-compiled card'}, children)]);
}

// Auto-clustering's coverage of the train step (the steady trace window): the share of op time inside
// XLA's clusters as a bar, the op types left outside (their layers, share and reason), the advice as code.
function coverageCard(c) {
  const known = typeof c.share_inside === 'number';
  const rows = (c.ops_outside || []).slice(0, 6).map((op) => el('tr', {}, [
    el('td', {}, op.op), el('td', {}, String(op.nodes)), el('td', {}, (op.layers || []).join(', ') || '—'),
    el('td', {}, pct(op.share)), el('td', {class: 'reason'}, op.reason)]));
  const children = [
    el('div', {class: 'headline'}, `${pct(c.share_inside)} of the train step's op time ran in XLA ` +
       `(${c.clusters} cluster(s), ${c.steps} steps traced); ${c.nodes_outside} op node(s) outside`),
    // No bar for a share not measured: an empty bar would read as 0%.
    known ? el('div', {class: 'coverage-bar', title: `${pct(c.share_inside)} inside XLA`},
               el('div', {class: 'coverage-inside', style: `width: ${(100 * c.share_inside).toFixed(1)}%`}))
          : el('p', {class: 'muted'}, 'The share of op time inside XLA was not measured.'),
    el('table', {class: 'coverage-ops'}, [
      el('thead', {}, el('tr', {}, ['op outside XLA', 'nodes', 'layers', 'op time', 'why'].map((h) => el('th', {}, h)))),
      el('tbody', {}, rows)]),
    el('p', {class: 'muted'}, `Counted: ${c.counted}.`)];
  // The advice's own words for what its fix does: a move into dataset.map takes the op out of the step.
  const effect = c.advice && (c.advice.effect || `for ${c.advice.op}`);
  if (c.advice && c.advice.code) children.push(codeBlock(`Fix: ${effect}`, c.advice.code));
  else if (c.advice) children.push(el('p', {class: 'cause'}, `Fix (${effect}): ${c.advice.fix}`));
  else if (c.no_advice) children.push(el('p', {class: 'muted'}, `No fix advised: ${c.no_advice}.`));
  return el('section', {id: 'coverage'}, [el('h3', {}, 'What XLA compiled of the step (auto-clustering)'),
    el('div', {class: 'coverage card'}, children)]);
}

// "AsString in layer 'dedup', ..." (the ops XLA could not compile, once each).
function unsupportedOps(found) {
  const said = found.ops.map((op) => op.layer ? `${op.op} in layer '${op.layer}'` : op.op);
  return [...new Set(said)].join(', ');
}

function stormCards(storms) {
  const section = el('section', {id: 'storms'}, [el('h3', {}, `Recompilation storms (${storms.length})`)]);
  if (!storms.length) section.appendChild(el('div', {class: 'muted'}, 'None.'));
  for (const s of storms) {
    const numbers = `${s.count} new input signatures in ${s.phase} steps ${s.window_start}–${s.step}; ` +
      `${s.compiles} compiles, ${seconds(s.compile_seconds)} compiling vs ` +
      (s.steady_step_seconds === null ? 'no steady step yet' : `${ms(s.steady_step_seconds)} per steady step`) +
      `; action: ${s.action}`;
    const varying = el('ul', {}, s.varying.map((v) => el('li', {}, `${v.path} axis ${v.axis}: ` +
                                                                 `${v.min}..${v.max} (${v.n_values} values)`)));
    section.appendChild(advisedCard('storm', `Storm (${s.phase}) at step ${s.step}: ${s.count} new input shapes`,
                                    numbers, s, [varying]));
  }
  return section;
}

// jit='fastest': the mode kept, why, and both modes' measured steady steps.
function decisionCard(d) {
  const title = d.mode ? `jit='fastest' kept XLA ${d.mode.toUpperCase()} (${d.basis})` :
    "jit='fastest' is measuring XLA on and off";
  const rows = d.rows.map((r) => el('tr', {'data-mode': r.mode, class: r.kept ? 'selected' : ''}, [
    td(`XLA ${r.mode}${r.mode === d.default ? ' (default)' : ''}`),
    td(r.median === null ? '—' : ms(r.median), {'data-seconds': r.median}),
    td(r.spread === null ? '—' : ms(r.spread)), td(String(r.steps)), td(String(r.blocks)),
    td(r.first_call === null ? '—' : seconds(r.first_call))]));
  const facts = [`trial compiles ${seconds(d.trial_compile_seconds || 0)}`];
  if (d.ratio) facts.push(`on/off ${d.ratio.on_over_off.toFixed(3)}` + (d.ratio.low === null ? '' :
    ` (95% interval ${d.ratio.low.toFixed(3)}–${d.ratio.high.toFixed(3)})`) + ` over ${d.ratio.rounds} rounds`);
  if (d.predicted_saving_seconds !== null) {
    facts.push(`predicted saving ${seconds(d.predicted_saving_seconds)} over the ${d.steps_left} steps left`);
  }
  if (d.decided_at_step !== null) facts.push(`decided at train step ${d.decided_at_step}`);
  if (d.revised_at_step) facts.push(`XLA off again from train step ${d.revised_at_step} (compiles beyond the price)`);
  if (d.switches) facts.push(`${d.switches} switches`);
  const head = ['mode', 'median step', 'spread (IQR)', 'steps measured', 'blocks', 'first call'];
  return el('section', {id: 'fastest'}, [el('h3', {}, 'JIT decision'), el('div', {class: 'card fastest'}, [
    el('div', {class: 'card-title'}, title), el('div', {class: 'card-detail'}, d.why),
    el('table', {}, [el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))), el('tbody', {}, rows)]),
    el('div', {class: 'card-detail muted'}, facts.join(' · '))])]);
}

// Phases over the compile budget, below the storm threshold: advice only.
function budgetCards(items) {
  const section = el('section', {id: 'budget'}, [el('h3', {}, `Compile budget (${items.length})`)]);
  for (const a of items) {
    const numbers = `${a.compiles} compiles; ${seconds(a.recompile_seconds)} beyond the first = ` +
      `${pct(a.share)} of ${seconds(a.wall_seconds)} (budget ${pct(a.budget)})`;
    section.appendChild(advisedCard('budget', `Over budget (${a.phase}): ${a.compiles} compiles`, numbers, a, []));
  }
  return section;
}

function pct(x) {
  return x === null || x === undefined ? 'n/a' : `${Math.round(100 * x)}%`;
}

function codeBlock(title, text) {
  const code = el('pre', {class: 'fix-code'}, el('code', {}, text));
  const button = el('button', {class: 'copy', type: 'button'}, 'Copy the fix');
  button.addEventListener('click', () => copy(text, button));
  // The button beside the title, not over the code: code lines are at most 100 columns and the box
  // shows them whole.
  return el('div', {class: 'fix'}, [el('div', {class: 'fix-head'}, [el('div', {class: 'card-title'}, title), button]),
                                    code]);
}

// A storm's or a budget advice's card: the headline, the cause and the fix code first; then the
// figures (real padding, bucketing); the long advice text behind a "details" disclosure.
function advisedCard(kind, title, numbers, s, extra) {
  const card = el('div', {class: `${kind} card`}, [
    el('div', {class: 'headline'}, title),
    el('p', {class: 'cause'}, `Cause: ${s.cause}`)]);
  if (s.fix_code) {
    card.appendChild(codeBlock(`Fix: ${s.fix_kind}`, s.fix_code));
  } else if (s.fix_kind) {
    card.appendChild(el('div', {class: 'fix'}, `Fix: ${s.fix_kind} ${JSON.stringify(s.fix)}`));
  }
  card.appendChild(el('div', {class: 'storm-numbers'}, numbers));
  appendRealPadding(card, s);
  card.appendChild(el('details', {class: 'advice-details'},
                      [el('summary', {}, 'details'), el('p', {class: 'advice'}, s.advice), ...extra]));
  return card;
}

function appendRealPadding(card, s) {
  const real = s.real;
  if (!real) return;
  if (!real.measured) {
    card.appendChild(el('div', {class: 'real-padding muted'}, `Real lengths not measured: ${real.reason}`));
    return;
  }
  const rows = real.rows.map((r) => el('tr', {}, [
    el('td', {}, r.fix), el('td', {}, r.lengths ? `[${r.lengths.join(', ')}]` : '—'),
    el('td', {}, r.compiles === null ? '—' : String(r.compiles)), el('td', {}, pct(r.overhead))]));
  const sampled = `${real.sampled_batches} of ${real.batches_seen} batches sampled, mean real length ${real.mean}`;
  card.appendChild(el('div', {class: 'real-padding'}, [
    el('div', {class: 'card-title'}, `Padding against real tokens of ${real.path} (${sampled})`),
    el('table', {}, [el('tr', {}, ['fix', 'lengths', 'compiles', 'padding vs real'].map((h) => el('th', {}, h))),
                     ...rows]),
    el('div', {class: 'better'}, real.better_fix === 'bucket_by_length' ?
       `Bucketing by real length saves more compute: ${Number(real.compute_ratio).toFixed(2)}x fewer padded ` +
       'tokens per epoch.' :
       'Padding the batches is as good as bucketing here.')]));
  if (real.bucket_code) card.appendChild(codeBlock('Alternative: bucket_by_length', real.bucket_code));
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (error) {  // no clipboard permission (plain http): select the code for Ctrl-C
    const range = document.createRange();
    range.selectNodeContents(button.nextSibling);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    button.textContent = 'Selected: press Ctrl-C';
    return;
  }
  button.textContent = 'Copied';
}

function traceLinks(traces) {
  const section = el('section', {id: 'traces'}, [el('h3', {}, `Profiler traces (${traces.length})`)]);
  if (!traces.length) {
    section.appendChild(el('div', {class: 'muted'}, 'No trace window in this run.'));
    return section;
  }
  if (!state.profileTab) {
    section.appendChild(el('div', {class: 'message', id: 'profile-missing'}, [
      'The Profile tab\'s plugin is not installed where TensorBoard runs, so it cannot open these traces. ' +
      'Install it with ', el('code', {}, state.profileInstall || 'pip install tensorboard-plugin-profile'),
      ' and restart TensorBoard.']));
  }
  const top = window.top.location;
  const profile = top.pathname + top.search + '#profile';
  section.appendChild(el('ul', {}, traces.map((t) => el('li', {}, [
    `${t.kind} window: `,
    state.profileTab ? el('a', {href: profile, target: '_top', class: 'profile-link'}, 'open the Profile tab') :
      el('span', {class: 'muted'}, 'Profile tab not installed'),
    ', run ', el('code', {}, t.profile_run || '?')]))));
  return section;
}

// ------------------------------------------------------------------ helpers

function el(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of [].concat(children === undefined ? [] : children)) {
    node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

function td(text, attrs) {
  return el('td', attrs, text);
}

function compare(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;
  if (b === null || b === undefined) return -1;
  return a < b ? -1 : 1;
}

function active(value) {
  return value === true ? 'on' : value === false ? 'off' : 'unknown';
}

function quantity(value, unit) {  // as report/figures.py's quantity: 3 digits and an SI prefix
  if (typeof value !== 'number') return 'n/a';
  for (const [prefix, scale] of [['P', 1e15], ['T', 1e12], ['G', 1e9], ['M', 1e6], ['k', 1e3]]) {
    if (Math.abs(value) >= scale) return `${Number((value / scale).toPrecision(3))} ${prefix}${unit}`;
  }
  return `${Number(value.toPrecision(3))} ${unit}`;
}

function seconds(s) {
  if (typeof s !== 'number') return '—';
  return s >= 1 ? `${s.toFixed(2)} s` : `${(1000 * s).toFixed(1)} ms`;
}

function ms(s) {
  return typeof s !== 'number' ? '—' : `${(1000 * s).toFixed(2)} ms`;
}
