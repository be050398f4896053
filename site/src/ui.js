// Shared page pieces: bars, errors, the model's name and size before it is fetched.
import { label } from './sky.js';

export const DASH = '\u2014';

// Horizontal probability bars: entries [[label, p]], `best` highlighted.
export function bars(el, entries, best) {
  el.replaceChildren();
  for (const [label, p] of entries) {
    const row = document.createElement('div');
    row.className = 'bar-row' + (label === best ? ' best' : '');
    const name = document.createElement('span');
    name.className = 'bar-label';
    name.textContent = label;
    // Long labels are clamped to a few lines by the CSS; the whole text stays on hover.
    name.title = label;
    const track = document.createElement('span');
    track.className = 'bar-track';
    const fill = document.createElement('span');
    fill.className = 'bar-fill';
    fill.style.width = `${Math.max(0, Math.min(1, p)) * 100}%`;
    track.append(fill);
    const val = document.createElement('span');
    val.className = 'bar-value';
    val.textContent = p.toFixed(3);
    row.append(name, track, val);
    el.append(row);
  }
}

export function showError(el, message) {
  el.textContent = message;
  el.hidden = false;
}

// An option as the person typed it, quoted and shortened so a 600-character line stays readable.
function quote(text, max = 60) {
  const t = String(text);
  return `\u201c${t.length > max ? `${t.slice(0, max - 1)}\u2026` : t}\u201d`;
}

// The engine's refusal (`questions.q.criteria: option `billing` is 61 tokens long; …`) in words
// about the form's fields: the person typed options, not `criteria`. `options` lists what the
// form sent, in the request's order: {key, text}, `key` being how the engine names an option
// (its label; a score level's index) and `text` what was typed.
export function explainRefusal(message, options = [], qid = 'q') {
  const msg = String(message);
  const prefix = `questions.${qid}.`;
  const optionAt = (i) => {
    const o = options[i];
    return o ? `Option ${i + 1} (${quote(o.text)})` : `Option ${i + 1}`;
  };
  // Other paths of the same question inside a message: criteria[j] -> option j+1.
  const paths = (text) =>
    text
      .replaceAll(new RegExp(`${prefix.replaceAll('.', '\\.')}criteria\\[(\\d+)\\]`, 'g'), (_, j) => `option ${Number(j) + 1}`)
      .replace(/\bcriteria\b/g, 'options');
  if (!msg.startsWith(prefix)) {
    if (msg.startsWith('state: ')) return `State: ${msg.slice(7)}`;
    return paths(msg);
  }
  const m = /^([a-z_]+)(?:\[(\d+)\])?(?:\.[^:]*)?: ([\s\S]*)$/.exec(msg.slice(prefix.length));
  if (!m) return paths(msg);
  const [, field, index, rest] = m;
  if (field === 'instructions') return `Question: ${rest}`;
  if (field === 'type') return `Question type: ${rest}`;
  if (field !== 'criteria') return paths(rest);
  if (index !== undefined) {
    // `the label "x" is given twice (also …)`: the option is already named.
    const body = paths(rest.replace(/^the label ".*?" (?=is )/, ''));
    return `${optionAt(Number(index))}${body.startsWith('is ') ? ' ' : ': '}${body}`;
  }
  const long = /^option `([\s\S]*)` is (\d+) tokens long; ([\s\S]*)$/.exec(rest);
  if (long) {
    const [, key, tokens, why] = long;
    const i = options.findIndex((o) => o.key === key);
    const who = i >= 0 ? optionAt(i) : `Option ${quote(key)}`;
    const room = why
      .replace(/^at most (\d+) tokens fit per option:/, 'at most $1 fit:')
      .replace(/at most (\d+) tokens fit per option in/, 'at most $1 fit per option in');
    return `${who} is ${tokens} tokens long; ${room}`;
  }
  return `Options: ${paths(rest).replace('max_len = ', '')}`;
}

// Name and download size of a model URL: from models/manifest.json when the release lists it,
// else from a HEAD request; null size when neither says.
export async function describeModel(modelUrl) {
  const name = decodeURIComponent(new URL(modelUrl).pathname.split('/').pop() || modelUrl);
  try {
    const manifestUrl = new URL('models/manifest.json', location.href);
    const res = await fetch(manifestUrl);
    if (res.ok) {
      const m = await res.json();
      for (const model of m.models || []) {
        for (const f of model.files || []) {
          // Paths in the manifest are relative to the release root (this page's folder).
          if (new URL(f.path, location.href).href === modelUrl) {
            return { name: `${model.name} (${label(f)}, ${f.path.split('/').pop()})`, bytes: f.bytes };
          }
        }
      }
    }
  } catch {
    // fall through to HEAD
  }
  try {
    const res = await fetch(modelUrl, { method: 'HEAD' });
    const n = Number(res.headers.get('content-length'));
    if (res.ok && n > 0) return { name, bytes: n };
  } catch {
    // the download itself reports what is wrong
  }
  return { name, bytes: null };
}
