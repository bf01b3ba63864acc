/**
 * The task board at the relay's /app/: a small app built on buzz-sync-js, and its example.
 * Tasks are `buzz.task` artifacts (content `{"done": bool}`) in channels; the collection lives
 * in IndexedDB, so a reload shows it at once and a closed laptop catches up when it opens.
 * Writes made offline wait in the outbox (shown under "Waiting to be sent") and go in order
 * when the relay is back; a write that lost a race is shown with the task as it is now.
 */

import { BuzzClient, type ArtifactRow, BuzzError, IndexedDbStore, type Published, npubOf, useWasmVerifier } from "../src/index.js";

const TYPE = "buzz.task";
// Tasks a column shows at first (about a screenful), then per "Show more" (also pressed for the
// person when the button scrolls into view): 10,000 tasks are never all in the document.
const COLUMN_FIRST = 30;
const COLUMN_PAGE = 200;
const FIRST_SCREEN = 200; // the newest tasks painted before the whole collection is read
const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const short = (id: string): string => id.slice(0, 8);

interface Task {
  row: ArtifactRow;
  done: boolean;
}

function parseTask(row: ArtifactRow): Task {
  let done = false;
  try {
    done = Boolean((JSON.parse(row.content || "{}") as { done?: unknown }).done);
  } catch {
    // content of another app: shown as not done
  }
  return { row, done };
}

async function main(): Promise<void> {
  // Marks for bench/buzz_sync_js.py (first paint) and for anyone profiling the page.
  performance.mark("buzz-app:start");
  const store = await IndexedDbStore.open("buzz-app");
  // Signatures are checked with libsecp256k1 in WebAssembly (verifier/build.sh, ~15x cheaper
  // than pure JS): a chunk of its own, loaded beside the first paint, not before it. /app/'s CSP
  // allows 'wasm-unsafe-eval' for it; where WebAssembly is refused, noble checks instead.
  void useWasmVerifier().then((wasm) => (document.body.dataset.verifier = wasm ? "wasm" : "noble"));
  const client = await BuzzClient.open({
    relay: location.origin,
    store,
    // The next page's signatures are checked in a worker while this thread writes a page.
    verifyWorker: () => new Worker(new URL("./verify-worker.js", import.meta.url), { type: "module" }),
    warn: (message) => {
      const warning = $("warning");
      warning.textContent = message;
      warning.hidden = false;
    },
  });
  $("whoami").textContent = `you are ${npubOf(client.pubkey).slice(0, 20)}… (${client.signerSource} key)`;
  $("whoami").dataset.pubkey = client.pubkey;
  const names: Record<string, string> = JSON.parse((await store.getMeta("channel-names")) ?? "{}");
  const shown = new Set<string>(JSON.parse((await store.getMeta("channels-shown")) ?? "[]") as string[]);
  let tasks: ArtifactRow[] = [];
  const showing = new Map<string, number>(); // tasks shown per column, past the first screenful

  const channelName = (h: string): string => names[h] ?? `channel ${short(h)}`;
  const channels = (): string[] => {
    const all = new Set<string>([...shown, ...tasks.map((row) => row.channel)]);
    return [...all].sort((a, b) => channelName(a).localeCompare(channelName(b)));
  };

  function showConflict(published: Published): void {
    const box = $("conflict");
    const head = published.conflict?.currentHead;
    box.textContent = head
      ? `Conflict: your change to "${published.event.tags.find((t) => t[0] === "title")?.[1] ?? ""}" was refused because ` +
        `someone changed the task first; it is now "${head.title}". Your change was not applied.`
      : `Refused: ${published.message}`;
    box.hidden = false;
  }

  async function report(published: Published): Promise<void> {
    if (published.conflict || published.status === "refused") showConflict(published);
    await renderPending();
  }
  client.onOutcome((outcome) => void report(outcome));

  async function write(action: Promise<Published>): Promise<void> {
    try {
      await report(await action);
    } catch (error) {
      const box = $("conflict");
      box.textContent = error instanceof BuzzError ? `${error.code}: ${error.message}` : String(error);
      box.hidden = false;
    }
  }

  async function renderPending(): Promise<void> {
    const queued = await client.publisher.outbox();
    $("pending").hidden = queued.length === 0;
    $("pending-list").replaceChildren(
      ...queued.map((entry) => {
        const li = document.createElement("li");
        const title = entry.event.tags.find((t) => t[0] === "title")?.[1];
        const op = entry.event.tags.find((t) => t[0] === "op")?.[1] ?? `kind ${entry.event.kind}`;
        li.textContent = `${op}${title ? `: ${title}` : ""}`;
        return li;
      }),
    );
  }

  function taskItem(task: Task, all: string[]): HTMLElement {
    const li = document.createElement("li");
    li.className = "task" + (task.done ? " done" : "");
    li.dataset.d = task.row.d;
    const check = document.createElement("input");
    check.type = "checkbox";
    check.checked = task.done;
    check.title = "done";
    check.addEventListener("change", () => void write(client.updateArtifact(task.row.d, { content: JSON.stringify({ done: check.checked }) })));
    const title = document.createElement("input");
    title.className = "title";
    title.value = task.row.title ?? "";
    title.setAttribute("aria-label", "title");
    title.addEventListener("change", () => void write(client.updateArtifact(task.row.d, { title: title.value })));
    const move = document.createElement("select");
    move.className = "move";
    move.setAttribute("aria-label", "move to channel");
    // The other channels are listed when the select is used: thousands of tasks times every
    // channel's option would dominate the first paint.
    move.append(new Option(channelName(task.row.channel), task.row.channel, false, true));
    const fill = (): void => {
      if (move.options.length > 1) return;
      for (const h of all) if (h !== task.row.channel) move.append(new Option(channelName(h), h));
    };
    move.addEventListener("focus", fill);
    move.addEventListener("mousedown", fill);
    move.addEventListener("change", () => void write(client.moveArtifact(task.row.d, move.value)));
    const remove = document.createElement("button");
    remove.textContent = "Delete";
    remove.className = "delete";
    remove.addEventListener("click", () => void write(client.deleteArtifact(task.row.d)));
    li.append(check, title, move, remove);
    return li;
  }

  /** `whole`: `tasks` is every task (else the first screenful: no "Show more" counts yet). */
  function render(whole = true): void {
    const byChannel = new Map<string, ArtifactRow[]>();
    for (const row of tasks) {
      const list = byChannel.get(row.channel);
      if (list) list.push(row);
      else byChannel.set(row.channel, [row]);
    }
    nearEnd.disconnect(); // the buttons being replaced
    const all = channels();
    const select = $<HTMLSelectElement>("new-channel");
    const chosen = select.value;
    select.replaceChildren(...all.map((h) => new Option(channelName(h), h, false, h === chosen)));
    const columns = all.map((h) => {
      const column = document.createElement("section");
      column.className = "column";
      column.dataset.channel = h;
      const heading = document.createElement("h2");
      heading.textContent = channelName(h);
      heading.title = h;
      const list = document.createElement("ul");
      const mine = byChannel.get(h) ?? [];
      const limit = showing.get(h) ?? COLUMN_FIRST;
      list.append(...mine.slice(0, limit).map((row) => taskItem(parseTask(row), all)));
      column.append(heading, list);
      if (whole && mine.length > limit) {
        const more = document.createElement("button");
        more.className = "more";
        more.textContent = `Show ${Math.min(COLUMN_PAGE, mine.length - limit)} more (${mine.length - limit} not shown)`;
        more.addEventListener("click", () => {
          showing.set(h, limit + COLUMN_PAGE);
          render(whole);
        });
        nearEnd.observe(more);
        column.append(more);
      }
      return column;
    });
    $("board").replaceChildren(...columns);
  }
  // A column's "Show more" scrolled into view shows the next tasks by itself.
  const nearEnd = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (entry.isIntersecting) (entry.target as HTMLButtonElement).click();
    }
  }, { rootMargin: "200px" });

  performance.mark("buzz-app:opened");
  // First paint: the newest tasks, read from a cursor over the store's modification index that
  // stops at a screenful; then the whole collection (column counts, live changes) replaces it.
  let whole = false;
  tasks = await client.query({ type: TYPE, orderBy: "modified", limit: FIRST_SCREEN });
  if (tasks.length) {
    render(whole);
    performance.mark("buzz-app:first-paint");
  }
  client.subscribe({ type: TYPE, orderBy: "modified" }, (update) => {
    performance.mark("buzz-app:rows");
    tasks = update.rows;
    whole = true;
    render(whole);
    performance.mark("buzz-app:rendered");
    document.body.dataset.tasks = String(tasks.length);
  });

  client.onProgress((progress) => {
    const parts = [progress.complete ? `${tasks.length} tasks` : "first sync…"];
    if (progress.syncing && progress.round) parts.push(`syncing: ${progress.round.items} items, ${progress.round.pages} pages`);
    parts.push(progress.live ? "live" : navigator.onLine ? "polling" : "offline");
    $("status").textContent = parts.join(" · ");
    document.body.dataset.live = String(progress.live);
    document.body.dataset.complete = String(progress.complete);
  });
  client.onError((error) => {
    $("status").textContent = `${error.code}: ${error.message}`;
  });
  addEventListener("offline", () => ($("status").textContent = "offline: changes wait to be sent"));

  $("new-task").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $<HTMLInputElement>("new-title");
    const channel = $<HTMLSelectElement>("new-channel").value;
    if (!channel) {
      $("conflict").textContent = "Create or show a channel first (Channels).";
      $("conflict").hidden = false;
      return;
    }
    void write(client.createArtifact({ channel, type: TYPE, title: input.value, content: JSON.stringify({ done: false }) }));
    input.value = "";
  });
  $("new-channel-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const name = $<HTMLInputElement>("channel-name").value.trim() || "tasks";
    void (async () => {
      const published = await client.createChannel(name, { private: $<HTMLInputElement>("channel-private").checked });
      await report(published);
      if (published.status !== "refused") {
        const h = published.event.tags[0][1];
        names[h] = name;
        shown.add(h);
        await store.setMeta("channel-names", JSON.stringify(names));
        await store.setMeta("channels-shown", JSON.stringify([...shown]));
        render(whole);
      }
    })();
  });
  $("add-channel-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const h = $<HTMLInputElement>("channel-id").value.trim().toLowerCase();
    shown.add(h);
    void store.setMeta("channels-shown", JSON.stringify([...shown])).then(() => render(whole));
  });

  await renderPending();
  client.start();
}

void main();
