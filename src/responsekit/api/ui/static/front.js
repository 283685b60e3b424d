// The front page's Copy buttons: each copies the text of the element its `data-copy` names.
// The Clipboard API needs a secure context (https, or loopback); elsewhere the text is selected
// for the user to copy.
(function () {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", async function () {
      const source = document.getElementById(button.dataset.copy);
      const text = source.textContent;
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch (error) {
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = "Selected: press Ctrl+C";
      }
      setTimeout(function () { button.textContent = "Copy"; }, 2000);
    });
  }
})();
