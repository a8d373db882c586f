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
