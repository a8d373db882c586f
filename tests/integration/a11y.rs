//! An accessibility audit of a page of the built-in UI in the real browser: the document's
//! language, landmark and heading, a label for every control and a name for every button,
//! link and image, WCAG AA contrast of every piece of text against what is painted behind it
//! (`a11y.js`), and a keyboard walk: Tab pressed through the page reaches every control, and
//! each shows a visible focus. The browser test runs it on every page it visits, in light and
//! in dark.

use crate::cdp::Page;

const AUDIT: &str = include_str!("a11y.js");

/// Fails the test with every problem the audit finds on `page` (`name`, `scheme` for the
/// message).
pub async fn audit(page: &Page, name: &str, scheme: &str) {
    let found = page.eval(AUDIT).await;
    let mut problems: Vec<String> = found
        .as_array()
        .unwrap_or_else(|| panic!("{name} ({scheme}): the audit answered {found}"))
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    problems.extend(keyboard_walk(page).await);
    assert!(
        problems.is_empty(),
        "{name} ({scheme}): {} accessibility problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// Every control a keyboard can reach, as `describe` names them: the walk's target.
const FOCUSABLE: &str = "[...document.querySelectorAll('a[href], button:not([disabled]), \
    input:not([type=hidden]):not([disabled]), select:not([disabled]), \
    textarea:not([disabled]), summary')].filter(e => e.getClientRects().length \
    && getComputedStyle(e).visibility !== 'hidden' \
    && !(e.closest('details:not([open])') && !e.closest('summary'))) \
    .map(e => (e.__a11y = true) && e).length";

/// The focused element, and whether its focus can be seen (an outline or a shadow); `null`
/// when nothing of the page has the focus.
const FOCUSED: &str = "(() => { const f = document.activeElement; \
    if (!f || f === document.body) return null; \
    const s = getComputedStyle(f); \
    const seen = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0) \
      || s.boxShadow !== 'none'; \
    const name = f.tagName.toLowerCase() + (f.id ? '#' + f.id : '') \
      + (f.getAttribute('name') ? '[name=' + f.getAttribute('name') + ']' : '') \
      + ' \"' + (f.textContent || f.value || '').trim().slice(0, 30) + '\"'; \
    const first = !f.__a11yReached; f.__a11yReached = true; \
    return [name, seen, !!f.__a11y, first]; })()";

/// The most Tab presses of one walk (a longer page is walked that far).
const MOST_TABS: usize = 150;

/// Presses Tab from the top of the page until the focus comes back to a control it reached
/// before: each control reached must show its focus, and every control must be reached.
async fn keyboard_walk(page: &Page) -> Vec<String> {
    let mut problems = Vec::new();
    page.eval("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
        .await;
    let controls = page.eval(FOCUSABLE).await.as_u64().unwrap_or(0) as usize;
    let mut reached = 0;
    for _ in 0..MOST_TABS {
        page.press_tab().await;
        let focused = page.eval(FOCUSED).await;
        let Some([name, seen, control, first]) = focused
            .as_array()
            .map(|a| a.as_slice())
            .and_then(|a| <&[_; 4]>::try_from(a).ok())
        else {
            continue;
        };
        if first == false {
            break;
        }
        if control == true {
            reached += 1;
        }
        if seen == false {
            problems.push(format!(
                "no visible focus: {}",
                name.as_str().unwrap_or("?")
            ));
        }
    }
    if reached < controls.min(MOST_TABS) {
        let missed = page
            .eval(
                "[...document.querySelectorAll('*')].filter(e => e.__a11y && !e.__a11yReached)\
                 .map(e => e.outerHTML.slice(0, 80)).slice(0, 10)",
            )
            .await;
        problems.push(format!(
            "Tab reached {reached} of {controls} controls; not: {missed}"
        ));
    }
    page.eval(
        "document.activeElement && document.activeElement.blur(); \
         document.querySelectorAll('*').forEach(e => { delete e.__a11y; delete e.__a11yReached; })",
    )
    .await;
    problems
}

/// Shows that the audit finds what it looks for: a control without a label, faint text and
/// an element whose focus cannot be seen, planted on `page` and taken away again.
pub async fn check_the_audit(page: &Page) {
    // Styles through the CSSOM: the page's policy refuses inline style attributes.
    page.eval(
        "(() => { const d = document.createElement('div'); d.id = 'planted'; \
         d.innerHTML = '<input id=\"planted-input\"><p id=\"planted-faint\">faint</p>\
         <a href=\"#\" id=\"planted-link\">hidden focus</a>'; \
         document.querySelector('main').append(d); \
         const faint = document.getElementById('planted-faint'); \
         faint.style.color = '#bbb'; faint.style.background = '#fff'; \
         document.getElementById('planted-link').style.outline = 'none'; })()",
    )
    .await;
    let mut found = page.eval(AUDIT).await.to_string();
    found.push_str(&keyboard_walk(page).await.join("\n"));
    page.eval("document.getElementById('planted').remove()")
        .await;
    for expected in [
        "no label: input#planted-input",
        "contrast 1.",
        "no visible focus: a#planted-link \"hidden focus\"",
    ] {
        assert!(
            found.contains(expected),
            "the audit missed {expected:?}: {found}"
        );
    }
}
