// The admin playground (conversations/admin_playground.py): a chat with one knowledge base and a retrieval test.
// Every text from the server is written with textContent, never as HTML.
//
// A turn is drawn in three steps: turnStart (the question, answer pending), turnAnswerAppend (text of the answer)
// and turnFinish (the final body: answer, sources, decision). The transport below sends the question and calls
// them; today it gets one JSON reply and appends the whole answer at once. A streamed transport (Server-Sent
// Events) takes its place by calling turnAnswerAppend for each piece as it arrives and turnFinish with the final
// event: nothing else on the page changes.
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
  async function postForm(url, fields) {
    const body = new FormData();
    body.append("tenant", tenant);
    for (const [name, value] of Object.entries(fields)) body.append(name, value);
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        body,
        headers: { "X-CSRFToken": csrfToken, Accept: "application/json" },
        credentials: "same-origin",
      });
    } catch (error) {
      return { ok: false, status: 0, message: "The server could not be reached; try again." };
    }
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

  const turnTransport = {
    async send(url, fields, turn) {
      const reply = await postForm(url, fields);
      if (!reply.ok) return reply;
      turnAnswerAppend(turn, reply.data.answer || "");
      turnFinish(turn, reply.data);
      return reply;
    },
  };

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

  function decisionRows(body) {
    const dedup = body.dedup;
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
    if (body.index && body.index.status !== "current") rows.push(["Index", body.index.status]);
    return rows;
  }

  function turnFinish(turn, body) {
    turn.classList.remove("kb-turn-pending");
    turn.dataset.turnId = body.turn_id;
    turn.dataset.action = body.dedup.action;
    turnNumbers.set(body.turn_id, body.number);
    turn.querySelector(".kb-question").textContent = `${body.number}. ${body.question}`;
    const answer = turn.querySelector("[data-role=answer]");
    answer.classList.remove("kb-pending");
    if (body.answer === null || body.answer === "") answer.replaceChildren(element("span", "No answer text.", "kb-muted"));
    else answer.textContent = body.answer;
    const sources = turn.querySelector(".kb-sources");
    if (body.sources.length) passageRows(sources.querySelector("tbody"), body.sources);
    else sources.replaceWith(element("p", "No sources.", "kb-muted"));
    const table = turn.querySelector(".kb-decision-table tbody");
    for (const [name, value] of decisionRows(body)) {
      const tr = document.createElement("tr");
      tr.dataset.field = name.toLowerCase().replace(/ /g, "-");
      tr.append(element("th", name), element("td", value));
      table.append(tr);
    }
    if (body.audit_url) {
      const link = element("a", "Open its audit event");
      link.href = body.audit_url;
      turn.querySelector(".kb-audit-link").append(link);
    }
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
      const reply = await turnTransport.send(url, fields, turn);
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
