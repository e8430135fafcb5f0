// hami ui: polls api/view and draws it. Every name in the data is a tenant's text:
// it goes into the page with textContent only, never as markup.
'use strict';
(function () {
  const KEY = 'hami-ui-token';
  let timer = null;
  let generation = 0;
  const FIRST = 12;   // node cards drawn before the first paint (two screenfuls at 1280x900)
  const CHUNK = 50;   // node cards drawn per turn after it

  function token() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {  // a fragment is never sent to the server; drop it from the address bar
      sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
      history.replaceState(null, '', location.pathname + location.search);
    }
    return sessionStorage.getItem(KEY);
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function status(text, error) {
    const s = document.getElementById('status');
    s.textContent = text;
    s.className = error ? 'error' : '';
  }

  function mib(v) { return v >= 10240 ? (v / 1024).toFixed(v >= 102400 ? 0 : 1) + ' GiB' : Math.round(v) + ' MiB'; }

  function hue(name) {  // one colour per namespace
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return 'hsl(' + (h % 360) + ' 60% 52%)';
  }

  function pct(part, total) { return total > 0 ? Math.max(0, Math.min(100, 100 * part / total)) : 0; }

  function bar(kind, gpu, total, size, used) {
    const row = el('div', 'row');
    row.appendChild(el('span', 'label', kind));
    const b = el('div', 'bar');
    b.dataset.kind = kind;
    b.dataset.total = total;
    for (const s of gpu.slices) {
      const seg = el('span', s.namespace === null ? 'seg other' : 'seg');
      const amount = size(s);
      seg.style.width = pct(amount, total) + '%';
      if (s.namespace !== null) seg.style.background = hue(s.namespace);
      seg.dataset.amount = amount;
      seg.dataset.pod = s.pod === null ? '' : s.pod;
      seg.title = (s.pod === null ? 'another namespace' : s.pod) + ': ' + amount;
      b.appendChild(seg);
    }
    if (used !== null && used !== undefined) {
      const u = el('span', 'used');
      u.style.width = pct(used, total) + '%';
      u.title = 'in use';
      b.appendChild(u);
    }
    row.appendChild(b);
    return row;
  }

  function gpuBox(g) {
    const box = el('div', g.healthy ? 'gpu' : 'gpu unhealthy');
    box.dataset.uuid = g.uuid;
    const head = el('div', 'gpu-head');
    head.appendChild(el('span', 'name', g.index + ' · ' + g.model));
    head.appendChild(el('span', 'mode', g.modeShown));
    let meta = mib(g.memoryAllocatedMiB) + ' / ' + mib(g.memoryTotalMiB);
    if (g.coresUnit !== 'none') meta += ' · ' + g.coresAllocated + ' / ' + g.coresTotal + (g.coresUnit === 'percent' ? '%' : ' ' + g.coresUnit);
    meta += ' · ' + g.sharers + '/' + g.splitCount + ' pods';
    if (g.memoryUsedMiB !== null) meta += ' · in use ' + mib(g.memoryUsedMiB) + ', ' + Math.round(g.utilizationPct) + '%';
    if (!g.healthy) meta += ' · unhealthy';
    if (g.cordoned) meta += ' · cordoned';
    head.appendChild(el('span', 'meta', meta));
    box.appendChild(head);
    box.appendChild(bar('memory', g, g.memoryTotalMiB, s => s.memoryMiB, g.memoryUsedMiB));
    if (g.coresUnit !== 'none') box.appendChild(bar('compute', g, g.coresTotal, s => s.cores, g.memoryUsedMiB === null ? null : g.utilizationPct * g.coresTotal / 100));
    if (g.slices.length) {
      const legend = el('div', 'legend');
      for (const s of g.slices) {
        const item = el('span', 'holder');
        const sw = el('span', 'swatch');
        sw.style.background = s.namespace === null ? '#8c959f' : hue(s.namespace);
        item.appendChild(sw);
        let text = s.pod === null ? '(another namespace)' : s.pod;
        text += s.whole ? ' whole' : s.mig.length ? ' mig ' + s.mig.join('+') : ' ' + mib(s.memoryMiB);
        item.appendChild(document.createTextNode(text));
        legend.appendChild(item);
      }
      box.appendChild(legend);
    }
    return box;
  }

  function section(title, id) {
    const s = el('section');
    s.id = id;
    s.appendChild(el('h2', null, title));
    return s;
  }

  function table(headers, rows) {
    const t = el('table');
    const tr = el('tr');
    for (const h of headers) tr.appendChild(el('th', null, h));
    t.appendChild(tr);
    for (const r of rows) {
      const row = el('tr');
      for (const c of r) row.appendChild(c instanceof Node ? wrap(c) : el('td', null, c));
      t.appendChild(row);
    }
    return t;
  }

  function wrap(node) { const td = el('td'); td.appendChild(node); return td; }

  function asks(r) {
    const what = r.migProfile ? 'mig ' + r.migProfile : r.memoryMiB ? mib(r.memoryMiB) : r.memoryPct ? r.memoryPct + '% memory' : 'whole';
    return r.count + '× ' + r.vendor + ' ' + what + (r.coresPct ? ', ' + r.coresPct + (r.coresUnit === 'percent' ? '%' : ' ' + r.coresUnit) : '');
  }

  function render(d) {
    const view = el('div');
    const gpus = d.nodes.reduce((n, x) => n + x.gpus.length, 0);
    let memT = 0, memA = 0;
    for (const n of d.nodes) for (const g of n.gpus) { memT += g.memoryTotalMiB; memA += g.memoryAllocatedMiB; }
    const totals = el('div', 'totals');
    totals.id = 'totals';
    totals.appendChild(el('span', null, d.nodes.length + ' nodes'));
    totals.appendChild(el('span', null, gpus + ' GPUs'));
    totals.appendChild(el('span', null, mib(memA) + ' of ' + mib(memT) + ' allocated'));
    totals.appendChild(el('span', null, d.pending.length + d.pendingLeftOut + ' pending'));
    if (d.viewer.user) totals.appendChild(el('span', null, 'as ' + d.viewer.user));
    if (d.usage.problem) totals.appendChild(el('span', 'problem', 'usage: ' + d.usage.problem));
    view.appendChild(totals);

    const pend = section('Pending', 'pending');
    if (d.pending.length) {
      pend.appendChild(table(['pod', 'asks', 'why'], d.pending.map(p => [
        p.pod,
        p.request.map(asks).join(', '),
        el('span', 'reason', p.reason)])));
    } else pend.appendChild(el('p', null, 'none'));
    if (d.pendingLeftOut) pend.appendChild(el('p', null, d.pendingLeftOut + ' more not explained (hami explain NAMESPACE/POD)'));
    if (d.refused.length) {
      pend.appendChild(el('p', null, 'refused by the reading (no API server could have stored them; nothing is decided on them):'));
      pend.appendChild(table(['pod', 'why'], d.refused.map(p => [p.pod, el('span', 'reason', p.reason)])));
    }
    view.appendChild(pend);

    const ns = section('Namespaces', 'namespaces');
    ns.appendChild(table(['namespace', 'pods on GPUs', 'pending', 'quota used / hard'], d.namespaces.map(n => {
      const q = el('span');
      q.textContent = n.quota.map(x => x.key + ' ' + x.used + ' / ' + x.hard).join('; ') || '—';
      if (n.quota.some(x => x.used >= x.hard)) q.className = 'over';
      return [n.name, String(n.pods), String(n.pending), q];
    })));
    view.appendChild(ns);

    const nodes = section('Nodes', 'nodes');
    const grid = el('div', 'nodes');
    nodes.appendChild(grid);
    view.appendChild(nodes);
    // Drawn in chunks: the first screenful at once, the rest between frames, so a
    // cluster of thousands of GPUs shows at once and the tab never freezes. A refresh
    // is drawn aside and swapped in whole: no flicker.
    const gen = ++generation;
    const first = !document.body.dataset.rendered;
    const target = document.getElementById('view');
    let i = 0;
    const chunk = n => {
      const end = Math.min(d.nodes.length, i + n);
      for (; i < end; i++) grid.appendChild(nodeCard(d.nodes[i]));
    };
    const when = new Date(d.generated).toLocaleTimeString();
    status((d.problem ? 'stale (' + d.problem + '), ' : '') + 'updated ' + when + ' · every ' + d.refreshSeconds + ' s', Boolean(d.problem));
    if (first) {
      chunk(FIRST);
      target.replaceChildren(...view.childNodes);
      performance.mark('hami-rendered');
      // the rest only once the first frame is on screen: a chunk drawn before it would
      // hold it back
      afterPaint(() => { performance.mark('hami-painted'); document.body.dataset.painted = '1'; setTimeout(more, 0); });
    }
    const more = () => {
      if (gen !== generation) return;  // a newer answer is being drawn
      if (i < d.nodes.length) { chunk(CHUNK); setTimeout(more, 0); return; }
      if (!first) target.replaceChildren(...view.childNodes);
      afterPaint(() => { performance.mark('hami-complete'); document.body.dataset.complete = '1'; });
      document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
    };
    if (!first) more();
  }

  function afterPaint(f) { requestAnimationFrame(() => requestAnimationFrame(f)); }

  function nodeCard(n) {
    const card = el('article', 'node');
    card.dataset.node = n.name;
    card.appendChild(el('h3', null, n.name));
    for (const [vendor, why] of Object.entries(n.unregistered)) card.appendChild(el('p', 'problem', vendor + ': ' + why));
    for (const g of n.gpus) card.appendChild(gpuBox(g));
    return card;
  }

  function showLogin(message) {
    const form = document.getElementById('login');
    form.hidden = false;
    document.getElementById('login-error').textContent = message;
    status('a bearer token is needed', true);
  }

  async function load() {
    clearTimeout(timer);
    const headers = {};
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    let wait = 5;
    try {
      const r = await fetch('api/view', { headers: headers, cache: 'no-store' });
      const body = await r.json();
      if (!document.body.dataset.rendered) performance.mark('hami-data');  // fetched and parsed
      if (r.status === 401) { sessionStorage.removeItem(KEY); showLogin(body.error || 'refused'); return; }
      if (!r.ok) { status(r.status + ': ' + (body.error || 'error'), true); document.body.dataset.refused = String(r.status); }
      else { document.getElementById('login').hidden = true; render(body); wait = body.refreshSeconds; }
    } catch (e) {
      status('cannot reach the server: ' + e, true);
    }
    timer = setTimeout(load, wait * 1000);
  }

  document.getElementById('login').addEventListener('submit', ev => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById('token').value.trim());
    document.getElementById('token').value = '';
    load();
  });
  load();
})();
