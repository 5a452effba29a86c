// srpo report: renders the run data embedded in #report-data (srpo/report/data.py).
// Plain DOM code; every text from the run goes through textContent (model outputs are not HTML).
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x) ? "-" : Number(x).toFixed(d));
  const pct = (x) => (x === null || x === undefined ? "-" : (100 * x).toFixed(1) + "%");
  const uniq = (xs) => Array.from(new Set(xs)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

  // ------------------------------------------------------------------ summary
  function summary() {
    const b = D.budget;
    $("title").textContent = "srpo report: " + D.run.name;
    document.title = "srpo report: " + D.run.name;
    const rows = [
      ["workflow", b.workflow], ["method", b.method], ["model", b.model], ["policies", b.policies],
      ["steps", b.steps_done + " of " + b.steps_planned],
      ["batch", b.tasks_per_step + " tasks x G " + b.group_size],
      ["episodes generated", b.episodes], ["members (outputs)", b.members],
      ["tokens generated", b.tokens_generated], ["episodes dropped (dynamic sampling)", b.episodes_dropped],
      ["training seconds (phases)", fmt(b.train_seconds, 1)],
      ["episodes kept for this report", D.episodes.length],
    ];
    for (const [k, v] of rows) $("budget").append(el("tr", {}, el("td", { text: k }), el("td", { text: String(v) })));
    for (const w of D.warnings || []) $("budget").before(el("p", { class: "warn", "data-testid": "drift", text: w }));
    const acc = $("accuracy");
    const ev = D.evaluation;
    if (!ev.runs.length) acc.append(el("p", { class: "hint", text: "No evaluation in this run (eval.size 0)." }));
    else {
      const t = el("table", { class: "list" }, el("tr", {}, ...["evaluation", "step", "accuracy", "95% CI", "n"].map((h) => el("th", { text: h }))));
      for (const r of ev.runs) {
        t.append(el("tr", {}, el("td", { text: r.label || r.name }), el("td", { text: String(r.step) }),
          el("td", { text: pct(r.accuracy) }), el("td", { text: pct(r.ci_low) + " - " + pct(r.ci_high) }),
          el("td", { text: String(r.n) })));
      }
      acc.append(t);
    }
    if (ev.paired) {
      const p = ev.paired;
      acc.append(el("p", { "data-testid": "paired", text:
        `Paired (same ${p.n} problems): ${(100 * p.diff).toFixed(1)} points (95% CI ${(100 * p.diff_low).toFixed(1)} to ` +
        `${(100 * p.diff_high).toFixed(1)}); ${p.gained} gained, ${p.lost} lost; McNemar exact p = ${Number(p.p_value).toPrecision(3)}` }));
    }
    $("config").textContent = JSON.stringify(D.config, null, 2);
  }

  // ------------------------------------------------------------------ learning curves
  const GROUPS = [
    { name: "reward", re: /^(reward\/(mean|std)|rollout\/reward\/.+)$/, on: true },
    { name: "held-out accuracy", eval: true, on: true },
    { name: "loss", re: /^(loss|policy\/loss|kl_ref|entropy_bonus)$/ },
    { name: "KL", re: /^(approx_kl|mismatch\/kl|kl_ref)$/, on: true },
    { name: "entropy", re: /^entropy$/, on: true },
    { name: "clip fraction by set size", re: /^clip\/(k\d+|all)\/frac$/, on: true },
    { name: "set log-ratio by set size", re: /^set_ratio\/(k\d+|all)\/log_mean$/, on: true },
    { name: "set log-ratio std by set size", re: /^set_ratio\/(k\d+|all)\/log_std$/ },
    { name: "own-unit log-ratio std by set size", re: /^ratio\/(k\d+|all)\/log_std$/ },
    { name: "grad norm per policy", re: /^grad_norm\/.+$/, on: true },
    // train.grad_norm_by_set_size: the norm of each set size's part of the gradient
    { name: "grad norm by set size", re: /^grad\/k\d+\/norm$/, on: true },
    { name: "phase timings (s)", re: /^time\/.+$/, on: true },
    { name: "tokens/s", re: /^throughput\/.+$/, on: true },
    { name: "advantage |A| by set size", re: /^adv\/(k\d+|all)\/abs_mean$/ },
    { name: "degenerate groups", re: /^adv\/degenerate_share$/ },
    { name: "sets by size", re: /^sets\/(k\d+|all)\/count$/ },
    { name: "response length", re: /^length\/.+\/mean$/ },
    { name: "skipped (A = 0)", re: /^update\/skipped_.+$/ },
    // what workflows count in episode metadata, averaged over the episodes that record it:
    // the share of invalid router replies (routed), votes, parse failures
    { name: "workflow counts (invalid routes, ...)", re: /^rollout\/episode\/.+$/, on: true },
  ];

  function chart(group) {
    const div = el("div", { class: "chart", "data-group": group.name });
    $("charts").append(div);
    let traces;
    if (group.eval) {
      const rows = D.eval_rows;
      traces = [{ x: rows.map((r) => r.step), y: rows.map((r) => r["eval/accuracy"]), name: "accuracy",
        mode: "lines+markers", error_y: { type: "data", symmetric: false,
          array: rows.map((r) => r["eval/ci_high"] - r["eval/accuracy"]),
          arrayminus: rows.map((r) => r["eval/accuracy"] - r["eval/ci_low"]) } }];
    } else {
      const keys = Object.keys(D.metrics.series).filter((k) => group.re.test(k)).sort();
      traces = keys.map((k) => ({ x: D.metrics.steps, y: D.metrics.series[k], name: k, mode: "lines+markers" }));
    }
    if (!traces.length) { div.textContent = group.name + ": not logged in this run"; return; }
    Plotly.newPlot(div, traces, {
      title: { text: group.name, font: { size: 13 } }, margin: { l: 50, r: 10, t: 30, b: 35 },
      xaxis: { title: { text: "step" } }, legend: { font: { size: 10 } }, showlegend: true,
    }, { displaylogo: false, responsive: true });
  }

  function curves() {
    const picker = $("curve-picker");
    const draw = () => {
      $("charts").replaceChildren();
      for (const g of GROUPS) if (g.on) chart(g);
    };
    for (const g of GROUPS) {
      const box = el("input", { type: "checkbox" });
      box.checked = !!g.on;
      box.addEventListener("change", () => { g.on = box.checked; draw(); });
      picker.append(el("label", {}, box, " " + g.name));
    }
    if (typeof Plotly === "undefined") { $("charts").textContent = "plotly failed to load"; return; }
    draw();
  }

  // ------------------------------------------------------------------ episode browser
  const EP = D.episodes;
  const F = { step: "", workflow: "", size: "", agent: "", rmin: "", rmax: "", clip: "" };
  let selected = null;

  function options(select, values, label) {
    select.replaceChildren(el("option", { value: "", text: label }));
    for (const v of values) select.append(el("option", { value: String(v), text: String(v) }));
  }

  const setMatches = (t) => (F.size === "" || t.size === Number(F.size)) &&
    (F.agent === "" || t.members.some((m) => m.agent === F.agent));

  function keep(ep) {
    if (F.step !== "" && ep.step !== Number(F.step)) return false;
    if (F.workflow !== "" && ep.workflow !== F.workflow) return false;
    if ((F.size !== "" || F.agent !== "") && !ep.transitions.some(setMatches)) return false;
    if (F.rmin !== "" && !(ep.reward >= Number(F.rmin))) return false;
    if (F.rmax !== "" && !(ep.reward <= Number(F.rmax))) return false;
    if (F.clip === "clipped" && !ep.transitions.some((t) => t.clipped > 0)) return false;
    if (F.clip === "skipped" && !ep.transitions.some((t) => t.skipped)) return false;
    return true;
  }

  function counts(shown) {
    const bySize = {};
    let sets = 0;
    for (const ep of shown) for (const t of ep.transitions) { bySize[t.size] = (bySize[t.size] || 0) + 1; sets++; }
    const c = $("ep-counts");
    c.replaceChildren();
    c.dataset.episodes = String(shown.length);
    c.dataset.sets = JSON.stringify(bySize);
    const sizes = Object.keys(bySize).map(Number).sort((a, b) => a - b);
    c.append(el("span", { text: `${shown.length} of ${EP.length} episodes shown; ${sets} active sets` +
      (sizes.length ? " (by size: " + sizes.map((k) => `${k}: ${bySize[k]}`).join(", ") + ")" : "") }));
  }

  function list() {
    const shown = EP.filter(keep);
    counts(shown);
    const body = $("ep-list").querySelector("tbody");
    body.replaceChildren();
    const LIMIT = 500;
    for (const ep of shown.slice(0, LIMIT)) {
      const tr = el("tr", { "data-step": ep.step, "data-index": ep.index, onclick: () => show(ep, tr) },
        el("td", { text: String(ep.step) }), el("td", { text: String(ep.index) }),
        el("td", { text: ep.workflow }), el("td", { text: fmt(ep.reward, 2) }),
        el("td", { text: ep.transitions.map((t) => t.size).join("-") }),
        el("td", { text: ep.task_id, title: ep.question || "" }));
      if (ep === selected) tr.classList.add("selected");
      body.append(tr);
    }
    if (shown.length > LIMIT) body.append(el("tr", {}, el("td", { colspan: "6", class: "hint",
      text: `${shown.length - LIMIT} more: narrow the filters (pick a step)` })));
    if (selected && keep(selected)) show(selected, null); else if (shown.length) show(shown[0], body.firstChild);
    else { selected = null; $("ep-detail").replaceChildren(el("p", { class: "hint", text: "No episode matches the filters." })); }
  }

  // Search protocol tags stand out; everything else is plain text.
  function richText(text) {
    const pre = el("pre", { class: "out" });
    const parts = String(text).split(/(<search>[\s\S]*?<\/search>|<information>[\s\S]*?<\/information>|<answer>[\s\S]*?<\/answer>)/);
    for (const p of parts) {
      if (!p) continue;
      const cls = p.startsWith("<search>") ? "tag-search" : p.startsWith("<information>") ? "tag-info"
        : p.startsWith("<answer>") ? "tag-answer" : null;
      pre.append(cls ? el("span", { class: cls, text: p }) : document.createTextNode(p));
    }
    return pre;
  }

  function badge(text, cls) { return el("span", { class: "badge " + (cls || ""), text }); }

  function transition(t) {
    const adv = t.advantage;
    const meta = el("div", { class: "meta" },
      el("b", { text: `${t.turn}. ${t.event}` }), badge(`size ${t.size}`),
      t.unconsumed_from ? badge(`unconsumed: "${t.unconsumed_from}" did not read it`, "unread") : null,
      badge(`return ${fmt(t.return, 2)}`),
      adv === undefined ? null : badge(`A ${fmt(adv, 3)}`, adv > 0 ? "pos" : adv < 0 ? "neg" : ""),
      t.skipped ? badge("skipped: A = 0, not computed", "skip") : null,
      t.log_ratio === null || t.log_ratio === undefined ? null : badge(`log-ratio ${Number(t.log_ratio).toExponential(2)}`),
      t.clipped === null || t.clipped === undefined ? null
        : badge(t.clipped > 0 ? `clipped ${(100 * t.clipped).toFixed(0)}%` : "not clipped", t.clipped > 0 ? "clip" : ""));
    const members = el("div", { class: "members" });
    for (const m of t.members) {
      members.append(el("div", { class: "member", "data-agent": m.agent },
        el("div", {}, el("span", { class: "who", text: m.agent }), " ",
          el("span", { class: "toks", text: `${m.policy} · ${m.num_trained_tokens}/${m.num_tokens} tokens · ${m.stop_reason}` +
            (m.advantage === undefined ? "" : ` · A ${fmt(m.advantage, 3)}`) })),
        richText(m.text),
        m.prompt === undefined ? null : el("details", {}, el("summary", { text: "prompt" }), el("pre", { text: m.prompt }))));
    }
    return el("div", { class: "transition" + (t.unconsumed_from ? " unconsumed" : "") +
        ((F.size !== "" || F.agent !== "") && setMatches(t) ? " match" : ""),
      "data-size": t.size }, meta, members);
  }

  function show(ep, row) {
    selected = ep;
    for (const r of $("ep-list").querySelectorAll("tr.selected")) r.classList.remove("selected");
    if (row) row.classList.add("selected");
    const comps = Object.entries(ep.reward_components || {}).map(([k, v]) => `${k} ${fmt(v, 2)}`).join(", ");
    const head = el("div", { class: "ep-head" },
      el("div", {}, el("b", { text: `step ${ep.step}, episode ${ep.index}` }), ` · ${ep.workflow} · task ${ep.task_id}`),
      el("div", {}, "question: ", el("span", { text: ep.question || "" })),
      el("div", {}, "gold: ", el("b", { text: String(ep.gold) }), ` · reward ${fmt(ep.reward, 3)} (${comps})`),
      el("details", {}, el("summary", { text: "metadata" }), el("pre", { text: JSON.stringify(ep.metadata, null, 1) })));
    $("ep-detail").replaceChildren(head, ...ep.transitions.map(transition));
  }

  function browser() {
    const steps = uniq(EP.map((e) => e.step));
    options($("f-step"), steps, "all steps");
    options($("f-workflow"), uniq(EP.map((e) => e.workflow)), "any");
    options($("f-size"), uniq(EP.flatMap((e) => e.transitions.map((t) => t.size))), "any");
    options($("f-agent"), uniq(EP.flatMap((e) => e.transitions.flatMap((t) => t.members.map((m) => m.agent)))), "any");
    if (steps.length) { F.step = String(steps[0]); $("f-step").value = F.step; }
    const bind = (id, key, ev) => $(id).addEventListener(ev, (e) => { F[key] = e.target.value; list(); });
    bind("f-step", "step", "change"); bind("f-workflow", "workflow", "change"); bind("f-size", "size", "change");
    bind("f-agent", "agent", "change"); bind("f-rmin", "rmin", "input"); bind("f-rmax", "rmax", "input");
    bind("f-clip", "clip", "change");
    $("f-reset").addEventListener("click", () => {
      for (const k of Object.keys(F)) F[k] = "";
      for (const id of ["f-step", "f-workflow", "f-size", "f-agent", "f-rmin", "f-rmax", "f-clip"]) $(id).value = "";
      list();
    });
    if (!EP.length) $("ep-counts").textContent = "No episodes kept in this run (checkpoint.episodes_per_step = 0, or no step done).";
    else list();
  }

  // ------------------------------------------------------------------ evaluation diff
  function answers(side) {
    const td = el("td", {}, el("span", { class: side.correct ? "ok" : "bad", text: side.correct ? "right" : "wrong" }));
    for (const a of side.answers || []) td.append(el("div", {}, el("i", { text: a.agent + (a.unread ? " (not read)" : "") + ": " }), richText(a.text)));
    return td;
  }

  function evalDiff() {
    const ev = D.evaluation;
    if (!ev.problems) { $("diff-summary").textContent = "No before/after evaluation pair in this run."; return; }
    const p = ev.paired;
    $("diff-summary").textContent = `${p.gained} problems gained, ${p.lost} lost, of ${p.n} (before ${pct(p.before)}, after ${pct(p.after)}).`;
    const draw = () => {
      const mode = $("d-filter").value;
      const body = $("diff").querySelector("tbody");
      body.replaceChildren();
      for (const q of ev.problems) {
        const gained = !q.before.correct && q.after.correct, lost = q.before.correct && !q.after.correct;
        if ((mode === "changed" && !(gained || lost)) || (mode === "gained" && !gained) || (mode === "lost" && !lost)) continue;
        body.append(el("tr", { "data-change": gained ? "gained" : lost ? "lost" : "same" },
          el("td", {}, el("div", { text: q.question || q.task_id }), el("small", { class: "hint", text: q.task_id })),
          el("td", { text: String(q.gold) }), answers(q.before), answers(q.after)));
      }
      if (!body.children.length) body.append(el("tr", {}, el("td", { colspan: "4", class: "hint", text: "none" })));
    };
    $("d-filter").addEventListener("change", draw);
    draw();
  }

  summary();
  curves();
  browser();
  evalDiff();
  document.body.dataset.ready = "1";
  document.body.dataset.readyMs = String(Math.round(performance.now()));
})();
