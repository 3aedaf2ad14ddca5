// The admin playground (conversations/admin/playground.py): a chat with one knowledge base and a retrieval test.
// Every text from the server is written with textContent, never as HTML.
//
// A turn is streamed (Server-Sent Events read from fetch's ReadableStream, as the API's messages endpoint sends them)
// and drawn as its events come: turnStart (the question, answer pending), then `decision` (the dedup decision, and the
// whole answer of a stored answer or small talk), `sources`, `delta` (the next piece of the answer, appended), and
// `done` (the complete answer as stored, the turn's number and audit event) or `error` (the answer service failed:
// said in the turn, which keeps what had arrived and is recorded as failed; or, with no turn id, the turn could not
// be recorded at all). A refusal before the first event (a bad
// question, an expired conversation) is JSON: the turn is taken back and the message shown under the form.
(function () {
  "use strict";

  const picker = document.getElementById("kb-playground-pick");
  const tenantSelect = document.getElementById("kb-playground-tenant");
  if (picker && tenantSelect) {
    // Another tenant's knowledge bases are other ids: open the new tenant at its first knowledge base.
    tenantSelect.addEventListener("change", () => {
      const kbSelect = document.getElementById("kb-playground-kb");
      if (kbSelect) kbSelect.disabled = true;
      picker.submit();
    });
  }

  const root = document.getElementById("kb-playground");
  if (!root) return;
  const csrfToken = root.querySelector("input[name=csrfmiddlewaretoken]").value;
  const tenant = root.dataset.tenant;
  const knowledgeBase = root.dataset.knowledgeBase;
  const turnNumbers = new Map(); // turn id -> its number, for "matched turn 2"
  let conversationId = null;

  // --- requests ------------------------------------------------------------------------------------------------
  // POST `fields` (and the tenant) as a form; the fetch Response, or null when the server could not be reached.
  async function post(url, fields, accept) {
    const body = new FormData();
    body.append("tenant", tenant);
    for (const [name, value] of Object.entries(fields)) body.append(name, value);
    try {
      return await fetch(url, {
        method: "POST",
        body,
        headers: { "X-CSRFToken": csrfToken, Accept: accept },
        credentials: "same-origin",
      });
    } catch (error) {
      return null;
    }
  }

  const UNREACHABLE = { ok: false, status: 0, message: "The server could not be reached; try again." };

  async function postForm(url, fields) {
    const response = await post(url, fields, "application/json");
    return response ? jsonReply(response) : UNREACHABLE;
  }

  // A JSON reply: { ok, status, data }, or { ok: false, message } for a refusal or an admin page instead.
  async function jsonReply(response) {
    const type = response.headers.get("Content-Type") || "";
    if (!type.includes("application/json")) {
      // The admin's own pages: the sign-in form when the session ended, Django's CSRF page.
      const message = response.redirected ? "Your session has ended: sign in again and reload this page." : `The server answered HTTP ${response.status}.`;
      return { ok: false, status: response.status, message };
    }
    const data = await response.json();
    if (!response.ok) return { ok: false, status: response.status, message: data.message || `HTTP ${response.status}`, data };
    return { ok: true, status: response.status, data };
  }

  // One event block of a stream ("event: <name>" and "data: <JSON>" lines), or null for anything else (a comment).
  function eventParse(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (!data.length) return null;
    try {
      return { name, data: JSON.parse(data.join("\n")) };
    } catch (error) {
      return null;
    }
  }

  // Post the question and draw the turn's events as they arrive; { ok: false, message } for a refusal (no event).
  async function turnStream(url, fields, turn) {
    const response = await post(url, fields, "text/event-stream");
    if (!response) return UNREACHABLE;
    const type = response.headers.get("Content-Type") || "";
    if (!type.includes("text/event-stream") || !response.body) {
      const reply = await jsonReply(response);
      return reply.ok ? { ok: false, status: reply.status, message: "The server answered without streaming the turn." } : reply;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let ended = false;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = eventParse(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          if (event) ended = turnEvent(turn, event) || ended;
        }
        if (done) break;
      }
    } catch (error) {
      // The connection broke mid-stream: said below, with what had arrived kept.
    }
    if (!ended) {
      turnError(turn, "The connection was lost before the answer was complete: the turn is recorded as interrupted. Ask again.");
    }
    return { ok: true, status: response.status };
  }

  // Draw one event; true once the turn has ended (done or error).
  function turnEvent(turn, event) {
    const data = event.data;
    if (event.name === "decision") turnDecision(turn, data);
    else if (event.name === "sources") turnSources(turn, data);
    else if (event.name === "delta") turnAnswerAppend(turn, data.text || "");
    else if (event.name === "done") turnFinish(turn, data);
    else if (event.name === "error") {
      turnFinish(turn, data);
      const recorded = data.turn_id !== null && data.turn_id !== undefined;
      turnError(
        turn,
        recorded ? `${data.message} (HTTP ${data.status}). The turn is recorded as failed; ask again.` : `${data.message} (HTTP ${data.status})`,
      );
    } else return false;
    return event.name === "done" || event.name === "error";
  }

  // --- drawing ---------------------------------------------------------------------------------------------------
  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function score(value) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(3);
  }

  function documentLabel(row) {
    const parts = [row.document_title || `document ${row.document_id}`];
    if (row.document_external_id) parts.push(`(${row.document_external_id})`);
    return parts.join(" ");
  }

  function passageRows(tbody, rows) {
    tbody.replaceChildren();
    rows.forEach((row, index) => {
      const tr = document.createElement("tr");
      tr.append(
        element("td", String(index + 1)),
        element("td", score(row.score), "nowrap kb-score"),
        element("td", score(row.similarity), "nowrap kb-score"),
        element("td", documentLabel(row), "kb-document"),
        element("td", row.text, "kb-passage"),
      );
      tbody.append(tr);
    });
  }

  const turnList = document.getElementById("kb-turns");
  const turnTemplate = document.getElementById("kb-turn-template");

  function turnStart(question) {
    const turn = turnTemplate.content.firstElementChild.cloneNode(true);
    turn.querySelector(".kb-question").textContent = question;
    turn.querySelector("[data-role=answer]").classList.add("kb-pending");
    turn.classList.add("kb-turn-pending");
    turnList.append(turn);
    turn.scrollIntoView({ block: "nearest" });
    return turn;
  }

  function turnAnswerAppend(turn, text) {
    const answer = turn.querySelector("[data-role=answer]");
    answer.classList.remove("kb-pending");
    answer.textContent += text;
  }

  function decisionRows(dedup) {
    const matched = dedup.matched_turn_id;
    const matchedLabel =
      matched === null ? "–" : turnNumbers.has(matched) ? `turn ${turnNumbers.get(matched)} (#${matched})` : `#${matched}`;
    const rows = [
      ["Action", dedup.action],
      ["Intent", dedup.intent],
      ["Similarity", score(dedup.similarity)],
      ["Matched turn", matchedLabel],
      ["Excluded passages", String(dedup.excluded_count)],
      ["Relaxed", dedup.relaxed ? "yes" : "no"],
    ];
    if (dedup.shadow_action) rows.push(["Shadow action", dedup.shadow_action]);
    rows.push(["Reason", dedup.reason || "–"]);
    return rows;
  }

  function decisionRowAdd(turn, name, value) {
    const tr = document.createElement("tr");
    tr.dataset.field = name.toLowerCase().replace(/ /g, "-");
    tr.append(element("th", name), element("td", value));
    turn.querySelector(".kb-decision-table tbody").append(tr);
  }

  // The first event: the decision is drawn at once; a stored answer (or small talk) comes whole with it.
  function turnDecision(turn, data) {
    turn.dataset.action = data.dedup.action;
    turn.dataset.phase = "decided";
    for (const [name, value] of decisionRows(data.dedup)) decisionRowAdd(turn, name, value);
    if (data.rewritten_question) decisionRowAdd(turn, "Rewritten as", data.rewritten_question);
    if (data.answer !== null && data.answer !== undefined) turnAnswerAppend(turn, data.answer);
  }

  function turnSources(turn, data) {
    turn.dataset.phase = "sources";
    const sources = turn.querySelector(".kb-sources");
    if (data.sources.length) passageRows(sources.querySelector("tbody"), data.sources);
    else sources.replaceWith(element("p", "No sources.", "kb-muted"));
    if (data.index && data.index.status !== "current") decisionRowAdd(turn, "Index", data.index.status);
  }

  // The last event: the answer as the turn stored it (the same text the deltas made), its number and audit event.
  function turnFinish(turn, data) {
    turn.classList.remove("kb-turn-pending");
    turn.dataset.phase = "done";
    // A turn that could not be recorded has no id and no number: its question is shown as asked.
    if (data.turn_id !== null && data.turn_id !== undefined) {
      turn.dataset.turnId = data.turn_id;
      turnNumbers.set(data.turn_id, data.number);
      turn.querySelector(".kb-question").textContent = `${data.number}. ${data.question}`;
    }
    const answer = turn.querySelector("[data-role=answer]");
    answer.classList.remove("kb-pending");
    if (data.answer !== null && data.answer !== undefined && data.answer !== "") answer.textContent = data.answer;
    else if (!answer.textContent) answer.replaceChildren(element("span", "No answer text.", "kb-muted"));
    if (data.audit_url) {
      const link = element("a", "Open its audit event");
      link.href = data.audit_url;
      turn.querySelector(".kb-audit-link").append(link);
    }
  }

  // A failure after the turn started: said in the turn itself, which keeps what had arrived.
  function turnError(turn, message) {
    turn.classList.remove("kb-turn-pending");
    turn.classList.add("kb-turn-failed");
    turn.querySelector("[data-role=answer]").classList.remove("kb-pending");
    showError(turn.querySelector(".kb-turn-error"), message);
  }

  function turnFailed(turn, message) {
    turn.remove();
    showError(askError, message);
  }

  function showError(node, message) {
    node.textContent = message;
    node.hidden = !message;
  }

  // --- chat --------------------------------------------------------------------------------------------------------
  const askForm = document.getElementById("kb-ask");
  const askButton = document.getElementById("kb-ask-button");
  const askError = document.getElementById("kb-ask-error");
  const questionInput = document.getElementById("kb-question");
  const forceRefresh = document.getElementById("kb-force-refresh");
  const conversationLabel = document.getElementById("kb-conversation");

  async function conversationStart() {
    const reply = await postForm(root.dataset.startUrl, { knowledge_base: knowledgeBase });
    if (!reply.ok) return reply;
    conversationId = reply.data.conversation;
    conversationLabel.textContent = `Conversation #${conversationId} (${reply.data.user_id})`;
    conversationLabel.dataset.conversation = conversationId;
    return reply;
  }

  askForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const question = questionInput.value.trim();
    showError(askError, "");
    if (!question) return showError(askError, "Write a question first.");
    askButton.disabled = true;
    try {
      if (conversationId === null) {
        const started = await conversationStart();
        if (!started.ok) return showError(askError, started.message);
      }
      const turn = turnStart(question);
      const fields = { question };
      if (forceRefresh.checked) fields.force_refresh = "on";
      const url = root.dataset.turnUrl.replace("/0/", `/${conversationId}/`);
      const reply = await turnStream(url, fields, turn);
      if (!reply.ok) return turnFailed(turn, reply.message);
      questionInput.value = "";
    } finally {
      askButton.disabled = false;
    }
  });

  questionInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      askForm.requestSubmit();
    }
  });

  document.getElementById("kb-new-conversation").addEventListener("click", () => {
    conversationId = null;
    turnNumbers.clear();
    turnList.replaceChildren();
    showError(askError, "");
    conversationLabel.textContent = "No conversation yet: the first question starts one.";
    delete conversationLabel.dataset.conversation;
    questionInput.focus();
  });

  // --- retrieval test ------------------------------------------------------------------------------------------
  const searchForm = document.getElementById("kb-search");
  const searchError = document.getElementById("kb-search-error");
  const searchSummary = document.getElementById("kb-search-summary");
  const hitsTable = document.getElementById("kb-hits");

  searchForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    showError(searchError, "");
    const button = document.getElementById("kb-search-button");
    button.disabled = true;
    try {
      const fields = {
        knowledge_base: knowledgeBase,
        query: document.getElementById("kb-query").value,
        top_k: document.getElementById("kb-top-k").value,
      };
      if (document.getElementById("kb-group-by-document").checked) fields.group_by_document = "on";
      const reply = await postForm(root.dataset.searchUrl, fields);
      if (!reply.ok) {
        hitsTable.hidden = true;
        searchSummary.textContent = "";
        return showError(searchError, reply.message);
      }
      const { results, index, took_ms: tookMs } = reply.data;
      passageRows(hitsTable.querySelector("tbody"), results);
      hitsTable.hidden = results.length === 0;
      const state = index.status === "current" ? "" : ` Index: ${index.status}.`;
      searchSummary.textContent = `${results.length} passage${results.length === 1 ? "" : "s"} in ${tookMs} ms.${state}`;
    } finally {
      button.disabled = false;
    }
  });

  // --- tabs ----------------------------------------------------------------------------------------------------------
  const tabs = Array.from(root.querySelectorAll("[role=tab]"));
  for (const tab of tabs) {
    tab.addEventListener("click", () => {
      for (const other of tabs) {
        const selected = other === tab;
        other.setAttribute("aria-selected", String(selected));
        document.getElementById(other.getAttribute("aria-controls")).hidden = !selected;
      }
    });
  }
})();
