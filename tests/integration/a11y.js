// The accessibility audit the browser test runs on every page of the built-in UI, in light
// and in dark (tests/integration/a11y.rs). It returns a list of problems, [] for none:
// - the document: a language, one <main>, one <h1>;
// - names: every control has a label (or aria-label), every button and link says what it
//   does, every image has alt text;
// - contrast (WCAG 2.1 AA): text against what is behind it at 4.5:1, large text at 3:1,
//   disabled controls exempt.
// The keyboard walk (every control reached by Tab, each showing its focus) is a11y.rs's: it
// needs real key presses.
(() => {
  const problems = [];
  const describe = (e) =>
    e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
    (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\s+/).join('.') : '') +
    (e.getAttribute('name') ? '[name=' + e.getAttribute('name') + ']' : '');
  const visible = (e) => {
    if (!e.getClientRects().length) return false;
    // A folded <details> keeps a layout for what it hides; only its summary shows.
    const folded = e.closest('details:not([open])');
    if (folded && !e.closest('summary')) return false;
    const s = getComputedStyle(e);
    return s.visibility !== 'hidden' && s.display !== 'none' && parseFloat(s.opacity) > 0;
  };

  if (!document.documentElement.lang) problems.push('the page names no language (<html lang>)');
  const mains = document.querySelectorAll('main').length;
  if (mains !== 1) problems.push(`${mains} <main> elements, not one`);
  const h1s = document.querySelectorAll('h1').length;
  if (h1s !== 1) problems.push(`${h1s} <h1> headings, not one`);

  const controls = document.querySelectorAll('input:not([type=hidden]), select, textarea');
  for (const c of controls) {
    const named = (c.labels && c.labels.length) || c.getAttribute('aria-label') ||
      c.getAttribute('aria-labelledby') || c.getAttribute('title');
    if (!named) problems.push(`no label: ${describe(c)}`);
  }
  for (const b of document.querySelectorAll('button, a[href], summary')) {
    const text = (b.textContent || '').trim() || b.getAttribute('aria-label') ||
      [...b.querySelectorAll('img[alt]')].map((i) => i.alt).join('').trim();
    if (!text) problems.push(`says nothing: ${describe(b)}`);
  }
  for (const img of document.querySelectorAll('img')) {
    if (!img.hasAttribute('alt')) problems.push(`no alt text: ${describe(img)}`);
  }

  // Colours as [r, g, b, a], 0–255 and 0–1.
  const parse = (css) => {
    const m = css.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,/]+/).filter(Boolean).map(parseFloat);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, below) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a)).concat([1]);
  };
  // What is painted behind `e`: its and its ancestors' backgrounds, composited.
  const backdrop = (e) => {
    const layers = [];
    for (let n = e; n; n = n.parentElement) {
      const bg = parse(getComputedStyle(n).backgroundColor);
      if (bg && bg[3] > 0) {
        layers.push(bg);
        if (bg[3] >= 1) break;
      }
    }
    let colour = [255, 255, 255, 1];
    for (const layer of layers.reverse()) colour = over(layer, colour);
    return colour;
  };
  const luminance = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      const s = v / 255;
      return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const seen = new Set();
  for (const e of document.querySelectorAll('body *')) {
    const ownText = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!ownText || !visible(e) || e.closest('[disabled], [aria-disabled=true]')) continue;
    const s = getComputedStyle(e);
    const fg = parse(s.color);
    if (!fg) continue;
    const bg = backdrop(e);
    const got = ratio(over(fg, bg), bg);
    const size = parseFloat(s.fontSize);
    const large = size >= 24 || (size >= 18.66 && parseInt(s.fontWeight, 10) >= 700);
    const need = large ? 3 : 4.5;
    if (got < need) {
      const key = describe(e) + s.color + s.backgroundColor;
      if (seen.has(key)) continue;
      seen.add(key);
      problems.push(`contrast ${got.toFixed(2)} < ${need}: ${describe(e)} (${s.color} on ` +
        `rgb(${bg.slice(0, 3).map(Math.round).join(', ')})) "${e.textContent.trim().slice(0, 30)}"`);
    }
  }

  return problems;
})()
