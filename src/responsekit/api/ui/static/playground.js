// The playground: a chat with a served model through the Responses API, streamed.
//
// Each turn is one `POST /ui/playground/responses` (the session's `POST /v1/responses`; see
// api/ui/playground.py for why this route and the header it wants), with `stream: true` and
// `store: true`; the next turn continues it with `previous_response_id`, so the thread lives on
// the server. The answer's events are read from the fetch body as they come: text deltas join,
// reasoning folds into a <details>, tool calls and server tools' items (function_call, mcp_call,
// file_search_call, web_search_call…) are shown as items. Stop aborts the fetch: the server sees
// its client leave and cancels the engine request; a stopped answer is not stored, so the thread
// goes on from the answer before it. Nothing here is inserted as HTML: every text is textContent.
(function () {
  const root = document.getElementById("playground");
  if (!root) return;
  const endpoint = root.dataset.endpoint;
  const maxBytes = Number(root.dataset.maxBytes) || Infinity;
  const thread = document.getElementById("thread");
  const composer = document.getElementById("composer");
  const message = document.getElementById("message");
  const attachment = document.getElementById("attachment");
  const attached = document.getElementById("attached");
  const sendButton = document.getElementById("send");
  const stopButton = document.getElementById("stop");
  const problem = document.getElementById("problem");
  const threadState = document.getElementById("thread-state");
  let previousId = null;
  let controller = null;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function pretty(value) {
    if (typeof value === "string") {
      try { return JSON.stringify(JSON.parse(value), null, 2); } catch (error) { return value; }
    }
    return JSON.stringify(value, null, 2);
  }

  function showThreadState() {
    threadState.textContent = previousId ? "Continues " + previousId + "." : "A new thread.";
  }

  function readAsDataURL(file) {
    return new Promise(function (resolve, reject) {
      const reader = new FileReader();
      reader.onload = function () { resolve(reader.result); };
      reader.onerror = function () { reject(reader.error); };
      reader.readAsDataURL(file);
    });
  }

  // A file as a content part: an image as input_image (a data URL), anything else as input_file.
  async function partOf(file) {
    const data = await readAsDataURL(file);
    if (file.type.startsWith("image/")) return { type: "input_image", image_url: data, detail: "auto" };
    return { type: "input_file", filename: file.name, file_data: data };
  }

  function userTurn(text, parts, files) {
    const turn = element("article", "turn user");
    turn.appendChild(element("div", "text", text));
    parts.forEach(function (part, index) {
      if (part.type === "input_image") {
        turn.appendChild(element("div", "attachment", "image " + files[index].name));
        const image = element("img", "attached");
        image.src = part.image_url;
        image.alt = files[index].name;
        turn.appendChild(image);
      } else {
        turn.appendChild(element("div", "attachment", "file " + part.filename));
      }
    });
    thread.appendChild(turn);
    return turn;
  }

  function label(item) {
    switch (item.type) {
      case "function_call": case "custom_tool_call": return "call " + item.name;
      case "mcp_call": return "MCP call " + item.server_label + "." + item.name;
      case "mcp_list_tools": return "MCP tools of " + item.server_label;
      case "mcp_approval_request": return "approval asked for " + item.server_label + "." + item.name;
      case "file_search_call": return "file search";
      case "web_search_call": return "web search";
      default: return item.type;
    }
  }

  // One output item's view: a message's text, folded reasoning, or a tool item.
  function itemView(item) {
    if (item.type === "message") {
      const view = element("div", "text answer");
      return { node: view, text: view };
    }
    if (item.type === "reasoning") {
      const details = element("details", "reasoning");
      details.appendChild(element("summary", null, "Reasoning"));
      const text = element("div", "text");
      details.appendChild(text);
      return { node: details, text: text };
    }
    const view = element("article", "item " + item.type);
    const heading = element("h3", null, label(item) + " ");
    const status = element("span", "status " + (item.status || ""), item.status || "");
    heading.appendChild(status);
    view.appendChild(heading);
    const args = element("pre", "arguments");
    view.appendChild(args);
    const result = element("div", "result");
    view.appendChild(result);
    const raw = element("details", "raw");
    raw.appendChild(element("summary", null, "JSON"));
    const json = element("pre");
    raw.appendChild(json);
    view.appendChild(raw);
    return { node: view, text: args, status: status, result: result, json: json };
  }

  // A finished item as it was stored: tool items show their arguments, results and errors.
  function finish(view, item) {
    if (item.type === "message") {
      view.text.textContent = (item.content || []).map(function (part) { return part.text || part.refusal || ""; }).join("");
      return;
    }
    if (item.type === "reasoning") {
      const parts = (item.content || []).concat(item.summary || []);
      const text = parts.map(function (part) { return part.text || ""; }).join("\n");
      if (text) view.text.textContent = text;
      return;
    }
    view.status.textContent = item.status || "";
    view.status.className = "status " + (item.status || "");
    if (item.arguments !== undefined) view.text.textContent = pretty(item.arguments);
    else if (item.input !== undefined) view.text.textContent = item.input;
    else if (item.queries) view.text.textContent = item.queries.join("\n");
    else if (item.action) view.text.textContent = pretty(item.action);
    else view.text.remove();
    view.result.textContent = "";
    if (item.output) view.result.appendChild(element("pre", null, pretty(item.output)));
    if (item.error) view.result.appendChild(element("pre", "error", pretty(item.error)));
    for (const found of item.results || []) {
      view.result.appendChild(element("div", "label", (found.filename || found.file_id) + " · score " + (found.score || 0).toFixed(3)));
      view.result.appendChild(element("div", "text", found.text || ""));
    }
    if (item.tools) view.result.appendChild(element("div", "text", item.tools.map(function (tool) { return tool.name; }).join(", ")));
    view.json.textContent = JSON.stringify(item, null, 2);
  }

  function assistantTurn() {
    const turn = element("article", "turn assistant");
    const output = element("div", "output");
    turn.appendChild(output);
    const meta = element("div", "meta");
    const status = element("span", "status in_progress", "waiting");
    meta.appendChild(status);
    const link = element("span", "inspect");
    meta.appendChild(link);
    const usage = element("span", "usage");
    meta.appendChild(usage);
    turn.appendChild(meta);
    thread.appendChild(turn);
    return { node: turn, output: output, status: status, link: link, usage: usage, items: {}, id: null };
  }

  function setStatus(answer, status) {
    answer.status.textContent = status;
    answer.status.className = "status " + status;
  }

  function show(answer, event) {
    const items = answer.items;
    const kind = event.type;
    if (kind === "response.created" || kind === "response.in_progress") {
      if (!answer.id) {
        answer.id = event.response.id;
        answer.node.dataset.responseId = answer.id;
        const link = element("a", null, "inspect " + answer.id);
        link.href = "/ui/responses/" + encodeURIComponent(answer.id);
        answer.link.appendChild(link);
      }
      setStatus(answer, event.response.status);
    } else if (kind === "response.output_item.added") {
      const view = itemView(event.item);
      items[event.output_index] = view;
      answer.output.appendChild(view.node);
    } else if (kind === "response.output_item.done") {
      const view = items[event.output_index];
      if (view) finish(view, event.item);
    } else if (kind.endsWith(".delta") && typeof event.delta === "string") {
      const view = items[event.output_index];
      if (view) view.text.textContent += event.delta;
    } else if (kind === "response.completed" || kind === "response.incomplete" || kind === "response.failed") {
      const response = event.response;
      answer.ended = true;
      setStatus(answer, response.status);
      if (response.usage) answer.usage.textContent = response.usage.input_tokens + " → " + response.usage.output_tokens + " tokens";
      if (response.incomplete_details) answer.usage.textContent += " (" + response.incomplete_details.reason + ")";
      if (response.error) answer.output.appendChild(element("div", "error", response.error.message));
      if (response.status === "failed") answer.node.classList.add("failed");
      else previousId = response.id;  // stored: the next turn continues it
      showThreadState();
    } else if (kind === "error") {
      answer.output.appendChild(element("div", "error", event.message || (event.error && event.error.message) || "error"));
    }
  }

  // The answer's events as they come (`sseEvents`, static/sse.js).
  async function follow(answer, body) {
    for await (const event of sseEvents(body)) show(answer, event);
  }

  async function failure(answer, reply) {
    let text = "HTTP " + reply.status;
    try { text = (await reply.json()).error.message; } catch (error) { /* not JSON */ }
    setStatus(answer, "failed");
    answer.node.classList.add("failed");
    answer.output.appendChild(element("div", "error", text));
    if (reply.status === 401) {
      const login = element("a", null, "Log in");
      login.href = "/ui/login?next=" + encodeURIComponent("/ui/playground");
      answer.output.appendChild(login);
    }
  }

  function request(content) {
    const body = {
      model: document.getElementById("model").value,
      input: [{ type: "message", role: "user", content: content }],
      stream: true,
      store: true,
    };
    if (previousId) body.previous_response_id = previousId;
    const limit = document.getElementById("max-output-tokens").value;
    if (limit) body.max_output_tokens = Number(limit);
    const instructions = document.getElementById("instructions").value.trim();
    if (instructions) body.instructions = instructions;
    const tools = document.getElementById("tools").value.trim();
    if (tools) body.tools = JSON.parse(tools);  // a SyntaxError is shown by send()
    return body;
  }

  async function send() {
    const text = message.value.trim();
    const files = Array.from(attachment.files);
    if (!text && !files.length) return;
    problem.textContent = "";
    let body;
    let parts;
    try {
      parts = await Promise.all(files.map(partOf));
      const content = (text ? [{ type: "input_text", text: text }] : []).concat(parts);
      body = JSON.stringify(request(content));
    } catch (error) {
      problem.textContent = "Cannot send: " + error.message;
      return;
    }
    if (body.length > maxBytes) {
      problem.textContent = "Too large: this server takes requests up to " + maxBytes + " bytes.";
      return;
    }
    const asked = userTurn(text, parts, files);
    const answer = assistantTurn();
    message.value = "";
    attachment.value = "";
    attached.textContent = "";
    controller = new AbortController();
    sendButton.disabled = true;
    stopButton.disabled = false;
    try {
      const reply = await fetch(endpoint, {
        method: "POST",
        headers: { "content-type": "application/json", "x-responsekit-playground": "1" },
        body: body,
        credentials: "same-origin",
        signal: controller.signal,
      });
      if (!reply.ok) await failure(answer, reply);
      else {
        await follow(answer, reply.body);
        if (!answer.ended) setStatus(answer, "interrupted");  // the stream broke before its final event
      }
    } catch (error) {
      if (error.name === "AbortError") {
        setStatus(answer, "stopped");
        answer.node.classList.add("stopped");
        asked.classList.add("stopped");
        answer.usage.textContent = "not stored: the thread goes on from the answer before";
        answer.link.textContent = "";
      } else {
        setStatus(answer, "failed");
        answer.output.appendChild(element("div", "error", String(error)));
      }
    } finally {
      controller = null;
      sendButton.disabled = false;
      stopButton.disabled = true;
      message.focus();
    }
  }

  composer.addEventListener("submit", function (event) {
    event.preventDefault();
    send();
  });
  message.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      send();
    }
  });
  stopButton.addEventListener("click", function () {
    if (controller) controller.abort();
  });
  attachment.addEventListener("change", function () {
    attached.textContent = Array.from(attachment.files).map(function (file) { return file.name; }).join(", ");
  });
  document.getElementById("new-thread").addEventListener("click", function () {
    previousId = null;
    thread.textContent = "";
    showThreadState();
  });
})();
