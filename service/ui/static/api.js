// Calls to the service with the API key the user typed once (kept in sessionStorage, i.e.
// for this tab only), and the server-sent-event stream read through fetch: EventSource
// cannot send an Authorization header.

const KEY = "rollouts.apiKey";
let waitingForKey = null;

export function key() {
  return sessionStorage.getItem(KEY);
}

function headers() {
  const k = key();
  return k ? { Authorization: `Bearer ${k}` } : {};
}

// Show the key form and resolve once a key is entered.
function askForKey() {
  if (!waitingForKey) {
    const form = document.getElementById("key-form");
    form.hidden = false;
    document.getElementById("key-input").focus();
    waitingForKey = new Promise((resolve) => {
      form.onsubmit = (e) => {
        e.preventDefault();
        sessionStorage.setItem(KEY, document.getElementById("key-input").value);
        form.hidden = true;
        document.getElementById("forget-key").hidden = false;
        waitingForKey = null;
        resolve();
      };
    });
  }
  return waitingForKey;
}

async function authorized(path, init = {}) {
  for (;;) {
    const r = await fetch(path, { ...init, headers: { ...headers(), ...(init.headers || {}) } });
    if (r.status !== 401) return r;
    sessionStorage.removeItem(KEY);
    await askForKey();
  }
}

export async function getJSON(path, init = {}) {
  const r = await authorized(path, init);
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    throw new Error(`${path}: ${r.status} ${JSON.stringify(body.detail ?? body)}`);
  }
  return r.json();
}

export async function postJSON(path, body) {
  return getJSON(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

// Follow a server-sent-event stream; onEvent(kind, data) per event. Reconnects after a drop
// (the caller reloads its snapshot in onOpen, so nothing missed in between stays missing).
export function follow(path, onEvent, onOpen, onState) {
  let delay = 1000;
  const run = async () => {
    try {
      const r = await authorized(path, { headers: { Accept: "text/event-stream" } });
      if (!r.ok) throw new Error(`${path}: ${r.status}`);
      onState("live");
      delay = 1000;
      await onOpen();
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let kind = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) kind = line.slice(7);
            else if (line.startsWith("data: ")) data.push(line.slice(6));
          }
          if (data.length) onEvent(kind, JSON.parse(data.join("\n")));
        }
      }
    } catch (e) {
      console.warn("event stream:", e);
    }
    onState("reconnecting");
    setTimeout(run, delay);
    delay = Math.min(delay * 2, 30000);
  };
  run();
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
  document.getElementById("forget-key").hidden = true;
}
