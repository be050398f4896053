// Shared page pieces: bars, errors, the model's name and size before it is fetched.

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
            return { name: `${model.name} (${f.variant.toUpperCase()}, ${f.path.split('/').pop()})`, bytes: f.bytes };
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
