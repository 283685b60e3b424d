// A live response's events, from a background run's resume stream or a foreground
// response's flight: each event is a row (a run of deltas on one item is one row with its count),
// text deltas are shown as they join; the page reloads once the run ends, to show the stored
// response. A flight's stream opens with a snapshot of its timeline so far (it keeps no events),
// whose times count from the request's arrival: the rows after it count from there too.
(function () {
  const section = document.getElementById("live");
  if (!section) return;
  const state = section.querySelector(".live-state");
  const text = section.querySelector(".live-text");
  const rows = section.querySelector("tbody");
  let opened = performance.now();
  let since = 0;
  const terminal = new Set(["response.completed", "response.incomplete", "response.failed"]);
  let last = null;

  function row(cells) {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      td.textContent = cell;
      tr.appendChild(td);
    }
    rows.appendChild(tr);
    return tr;
  }

  function detailOf(event) {
    let detail = "";
    if (event.item) detail = event.item.type + " " + (event.item.id || "");
    if (event.response) detail += " " + event.response.status;
    if (event.status) detail += " " + event.status;
    return detail.trim();
  }

  function snapshot(event) {
    since = event.at;
    opened = performance.now();
    for (const entry of event.entries) {
      if (entry.count) {
        const tr = row(["", entry.t.toFixed(3), entry.type, "×" + entry.count + " on item " + entry.output_index]);
        tr.className = "delta";
        last = { type: entry.type, index: entry.output_index, count: entry.count, tr: tr };
      } else {
        row([entry.sequence_number, entry.t.toFixed(3), entry.type, detailOf(entry)]);
        last = null;
      }
    }
  }

  function show(event) {
    if (event.type === "inspector.snapshot") return snapshot(event);
    const at = (since + (performance.now() - opened) / 1000).toFixed(3);
    if (event.type.endsWith(".delta")) {
      if (event.type === "response.output_text.delta") text.textContent += event.delta;
      if (last && last.type === event.type && last.index === event.output_index) {
        last.count += 1;
        last.tr.cells[3].textContent = "×" + last.count + " on item " + event.output_index;
        return;
      }
      const tr = row([event.sequence_number, at, event.type, "×1 on item " + event.output_index]);
      tr.className = "delta";
      last = { type: event.type, index: event.output_index, count: 1, tr: tr };
      return;
    }
    last = null;
    row([event.sequence_number, at, event.type, detailOf(event)]);
  }

  function ended(status) {
    state.textContent = status;
    setTimeout(function () { location.reload(); }, 1000);
  }

  // The resume stream's events as they come (`sseEvents`, static/sse.js).
  async function follow() {
    const answer = await fetch(section.dataset.events, { credentials: "same-origin" });
    if (!answer.ok) return ended("unavailable (" + answer.status + ")");
    state.textContent = "following";
    for await (const event of sseEvents(answer.body)) {
      show(event);
      if (terminal.has(event.type)) return ended(event.response.status);
    }
    ended("ended");
  }

  follow().catch(function () { ended("disconnected"); });
})();
