// Woodlark's web UI: the pages work without this; it only filters the repository list as
// you type (the form's GET does the same without a script).
'use strict';
document.addEventListener('DOMContentLoaded', () => {
  for (const input of document.querySelectorAll('input[data-filter]')) {
    const list = document.querySelector(input.dataset.filter);
    if (!list) continue;
    input.addEventListener('input', () => {
      const needle = input.value.trim().toLowerCase();
      for (const item of list.querySelectorAll('li[data-name]')) {
        item.hidden = needle !== '' && !item.dataset.name.toLowerCase().includes(needle);
      }
    });
  }
});

// Live views (modules/ui/logview.rs, pipeline.html, repo.html). Without a script the pages
// are whole as served; with one they follow the server's streams.
(() => {
  // Parts of the page marked `data-live-part` are swapped for the same parts of a fresh copy
  // of the page when the events stream says a pipeline of this repository changed.
  let refreshing = false, again = false;
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    try {
      const res = await fetch(location.href, { credentials: 'same-origin' });
      if (res.ok) {
        const fresh = new DOMParser().parseFromString(await res.text(), 'text/html');
        for (const part of document.querySelectorAll('[data-live-part][id]')) {
          const next = fresh.getElementById(part.id);
          if (next) part.replaceWith(document.importNode(next, true));
        }
      }
    } catch (_) { /* the next event tries again */ }
    refreshing = false;
    if (again) { again = false; setTimeout(refresh, 250); }
  }

  function followEvents(live) {
    const repo = Number(live.dataset.repo);
    const number = live.dataset.pipeline ? Number(live.dataset.pipeline) : null;
    const source = new EventSource(live.dataset.events, { withCredentials: true });
    source.onmessage = (e) => {
      let msg;
      try { msg = JSON.parse(e.data); } catch (_) { return; }
      if (!msg || !msg.repo || msg.repo.id !== repo) return;
      if (number !== null && (!msg.pipeline || msg.pipeline.number !== number)) return;
      refresh();
    };
  }

  // A chunk link (`a.chunk[data-from]`) becomes its lines.
  async function loadChunk(log, link) {
    if (link.dataset.loading) return;
    link.dataset.loading = '1';
    const res = await fetch(`${log.dataset.lines}?from=${link.dataset.from}`, { credentials: 'same-origin' });
    if (!res.ok) { delete link.dataset.loading; return; }
    const tpl = document.createElement('template');
    tpl.innerHTML = await res.text();
    link.replaceWith(tpl.content);
  }

  // The line `#L<n>` names, loading its chunk first when it is not on the page.
  async function showAnchor(log) {
    const m = /^#L(\d+)$/.exec(location.hash);
    if (!m || document.getElementById(`L${m[1]}`)) return;
    const line = Number(m[1]) - 1;
    for (const link of log.querySelectorAll('a.chunk[data-from]')) {
      const from = Number(link.dataset.from);
      const next = link.nextElementSibling;
      const to = next && next.matches('a.chunk[data-from]') ? Number(next.dataset.from) : Infinity;
      if (line >= from && line < to) {
        await loadChunk(log, link);
        const el = document.getElementById(`L${m[1]}`);
        if (el) el.scrollIntoView();
        return;
      }
    }
  }

  // New lines of a running step: the API's log stream says lines were written; the rendered
  // lines after the last one shown are fetched and appended.
  function followLog(log) {
    let next = Number(log.dataset.next);
    let busy = false, more = false;
    async function pull() {
      if (busy) { more = true; return; }
      busy = true;
      try {
        const res = await fetch(`${log.dataset.lines}?from=${next}`, { credentials: 'same-origin' });
        if (res.ok) {
          const after = Number(res.headers.get('x-next-line'));
          if (after > next) {
            const tpl = document.createElement('template');
            tpl.innerHTML = await res.text();
            const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
            log.append(tpl.content);
            next = after;
            if (atEnd) window.scrollTo(0, document.body.scrollHeight);
            if (after % 1000 === 0) more = true; // a full chunk: there may be more
          }
        }
      } catch (_) { /* the next message tries again */ }
      busy = false;
      if (more) { more = false; pull(); }
    }
    const source = new EventSource(log.dataset.live, { withCredentials: true });
    source.onmessage = (e) => {
      let entry;
      try { entry = JSON.parse(e.data); } catch (_) { return; }
      if (entry && typeof entry.line === 'number' && entry.line >= next) pull();
    };
    source.addEventListener('eof', () => { source.close(); pull(); refresh(); });
  }

  document.addEventListener('DOMContentLoaded', () => {
    // A refused form's page: the summary takes the focus, so a screen reader reads it first.
    const problem = document.getElementById('error-summary');
    if (problem) problem.focus();
    const live = document.getElementById('live');
    if (live && window.EventSource) followEvents(live);
    const log = document.getElementById('log');
    if (!log) return;
    showAnchor(log);
    window.addEventListener('hashchange', () => showAnchor(log));
    if ('IntersectionObserver' in window) {
      const seen = new IntersectionObserver((entries) => {
        for (const e of entries) {
          if (e.isIntersecting) { seen.unobserve(e.target); loadChunk(log, e.target); }
        }
      }, { rootMargin: '400px' });
      for (const link of log.querySelectorAll('a.chunk[data-from]')) seen.observe(link);
    }
    if (log.dataset.live && window.EventSource) followLog(log);
  });
})();
