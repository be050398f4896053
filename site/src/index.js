// The demo page: model card, progress bar, the question form and the answer.
import { startSky, pageOptions, publishedModels, formatBytes } from './sky.js';
import { bars, describeModel, explainRefusal, showError } from './ui.js';

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
    o.textContent = `${f.model} (${f.type || f.variant.toUpperCase()}, ${formatBytes(f.bytes)})`;
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

// The options box as criteria: labels alone make a list, any `label: description` makes an
// object. `options` is what was sent, in the request's order, as {key, text}: `key` is how the
// engine names an option (a label; a score level's index), `text` what the person typed (the
// score bars and the error messages use it). No lines for a choice or a score sends an empty
// list, so the engine's refusal counts the options rather than speaking of a missing field.
function readOptions(type, text) {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  if (type === 'noul') return { criteria: null, options: [] };
  if (type === 'score' || !lines.some((l) => l.includes(':'))) {
    const criteria = lines.map((l) => l.split(':')[0].trim());
    const options = criteria.map((c, i) => ({ key: type === 'score' ? String(i) : c, text: c }));
    return { criteria, options };
  }
  const criteria = {};
  for (const l of lines) {
    const at = l.indexOf(':');
    if (at < 0) criteria[l] = null;
    else criteria[l.slice(0, at).trim()] = l.slice(at + 1).trim() || null;
  }
  return { criteria, options: Object.keys(criteria).map((k) => ({ key: k, text: k })) };
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

// The answer, or the refusal in its place: the previous answer never stays under a new error.
function showAnswer(value, ms, options) {
  const a = value.answers.q;
  $('answer-error').hidden = true;
  $('answer').hidden = false;
  if (a.type === 'choice') {
    // A 600-character label is shortened here (whole on hover, and in the bars and the JSON).
    const choice = a.choice.length > 120 ? `${a.choice.slice(0, 119)}\u2026` : a.choice;
    $('answer-line').replaceChildren('Choice: ', Object.assign(document.createElement('strong'), { textContent: choice, title: a.choice }),
      ` (confidence ${a.confidence.toFixed(3)})`);
    bars($('bars'), Object.entries(a.probabilities), a.choice);
  } else if (a.type === 'score') {
    const levels = Object.keys(a.probabilities).length;
    $('answer-line').textContent = `Score: ${a.score.toFixed(3)} on 0–${levels - 1}`;
    // Each bar under the level's text as typed (the engine keys levels 0, 1, 2, …).
    const text = (k) => options.find((o) => o.key === k)?.text ?? k;
    const best = Object.entries(a.probabilities).reduce((x, y) => (y[1] > x[1] ? y : x))[0];
    bars($('bars'), Object.entries(a.probabilities).map(([k, p]) => [text(k), p]), text(best));
  } else {
    $('answer-line').textContent = `${a.noul >= 0.5 ? 'Yes' : 'No'}: P(yes) = ${a.noul.toFixed(3)}`;
    bars($('bars'), [['yes', a.noul], ['no', 1 - a.noul]], a.noul >= 0.5 ? 'yes' : 'no');
  }
  $('latency').textContent = `${ms.toFixed(2)} ms in the browser · ${value.usage.input_tokens} input tokens`;
  $('response').textContent = JSON.stringify(value, null, 2);
}

function showRefusal(message) {
  $('answer-line').replaceChildren();
  $('bars').replaceChildren();
  $('latency').textContent = '';
  $('response').textContent = '';
  $('answer').hidden = true;
  showError($('answer-error'), message);
}

$('ask-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const type = $('qtype').value;
  const { criteria, options } = readOptions(type, $('options').value);
  const request = {
    state: parseState($('state').value),
    questions: { q: { type, instructions: $('instructions').value, criteria } },
  };
  $('result-card').hidden = false;
  try {
    const { value, ms } = await sky.timed(request);
    showAnswer(value, ms, options);
  } catch (err) {
    // A refusal names the request's fields; say it in the form's words.
    showRefusal(err.response ? explainRefusal(err.message, options) : err.message);
  }
});
