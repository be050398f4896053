// The demo page: model card, progress bar, the question form and the answer.
import { startSky, pageOptions, publishedModels, formatBytes } from './sky.js';
import { bars, describeModel, showError } from './ui.js';

const $ = (id) => document.getElementById(id);
// window.sky exists as soon as the page's script has run; the model it loads is known once
// models/manifest.json is read (the engine module loads meanwhile).
const published = publishedModels();
const opts = published.then((files) => pageOptions(location.search, files));

const progress = $('progress');
const sky = startSky({
  modelUrl: opts.then((o) => o.modelUrl),
  prefer: pageOptions(location.search).prefer,
  onProgress(loaded, total) {
    if (total > 0) {
      progress.max = total;
      progress.value = loaded;
      $('status').textContent = `Downloading: ${formatBytes(loaded)} of ${formatBytes(total)}`;
    } else {
      $('status').textContent = `Downloading: ${formatBytes(loaded)}`;
    }
  },
});
window.sky = sky;

// The picker: every published file; choosing one reloads the page with ?model= (the other
// parameters kept), so the engine starts afresh on it.
Promise.all([published, opts]).then(([files, { modelUrl }]) => {
  const pick = $('model-pick');
  for (const f of files) {
    const o = document.createElement('option');
    o.value = f.path;
    o.textContent = `${f.model} (${f.variant.toUpperCase()}, ${formatBytes(f.bytes)})`;
    o.selected = f.url === modelUrl;
    pick.append(o);
  }
  pick.disabled = files.length < 2;
  $('model-picker').hidden = files.length === 0;
  pick.addEventListener('change', () => {
    const q = new URLSearchParams(location.search);
    q.set('model', pick.value);
    location.search = q.toString();
  });
  if (modelUrl) {
    describeModel(modelUrl).then(({ name, bytes }) => {
      $('model-name').textContent = name;
      $('model-size').textContent = bytes ? `${formatBytes(bytes)} to download` : 'size unknown';
    });
  }
});

sky.ready.then(
  (info) => {
    // The bar ends at the model's size in bytes (1 of 1 when the server sent no length).
    if (progress.max <= 1) progress.max = 1;
    progress.value = progress.max;
    $('status').textContent = `Ready in ${info.load_ms.toFixed(0)} ms.`;
    $('ask').disabled = false;
    $('engine-line').textContent =
      `Engine: ${info.simd ? 'WebAssembly SIMD128' : 'WebAssembly (scalar)'}, ${formatBytes(info.module_bytes)}; ` +
      `model ${info.model}: ${info.hidden} wide, ${info.encoder_layers} encoder + ${info.head_layers} head layers, f32 compute.`;
  },
  (err) => {
    $('status').textContent = 'The model could not be loaded.';
    showError($('error'), err.message);
  },
);

// The options box as criteria: labels alone make a list, any `label: description` makes an object.
function criteria(type, text) {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  if (type === 'noul' || lines.length === 0) return null;
  if (type === 'score' || !lines.some((l) => l.includes(':'))) {
    return lines.map((l) => l.split(':')[0].trim());
  }
  const obj = {};
  for (const l of lines) {
    const at = l.indexOf(':');
    if (at < 0) obj[l] = null;
    else obj[l.slice(0, at).trim()] = l.slice(at + 1).trim() || null;
  }
  return obj;
}

function parseState(text) {
  const t = text.trim();
  if (t.startsWith('{') || t.startsWith('[')) {
    try {
      return JSON.parse(t);
    } catch {
      return text;
    }
  }
  return text;
}

$('ask-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const type = $('qtype').value;
  const request = {
    state: parseState($('state').value),
    questions: { q: { type, instructions: $('instructions').value, criteria: criteria(type, $('options').value) } },
  };
  $('error').hidden = true;
  try {
    const { value, ms } = await sky.timed(request);
    const a = value.answers.q;
    $('result-card').hidden = false;
    if (a.type === 'choice') {
      $('answer-line').innerHTML = '';
      $('answer-line').append('Choice: ', Object.assign(document.createElement('strong'), { textContent: a.choice }),
        ` (confidence ${a.confidence.toFixed(3)})`);
      bars($('bars'), Object.entries(a.probabilities), a.choice);
    } else if (a.type === 'score') {
      $('answer-line').textContent = `Score: ${a.score.toFixed(3)} on 0–${Object.keys(a.probabilities).length - 1}`;
      bars($('bars'), Object.entries(a.probabilities));
    } else {
      $('answer-line').textContent = `${a.noul >= 0.5 ? 'Yes' : 'No'}: P(yes) = ${a.noul.toFixed(3)}`;
      bars($('bars'), [['yes', a.noul], ['no', 1 - a.noul]], a.noul >= 0.5 ? 'yes' : 'no');
    }
    $('latency').textContent = `${ms.toFixed(2)} ms in the browser · ${value.usage.input_tokens} input tokens`;
    $('response').textContent = JSON.stringify(value, null, 2);
  } catch (err) {
    showError($('error'), err.message);
  }
});
