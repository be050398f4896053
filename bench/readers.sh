#!/usr/bin/env bash
# Time and peak memory of refusing /dev/zero, a FIFO with no writer and a 3 GiB sparse file,
# for each kind of file skyctl reads that the command line reaches (BENCH.md, "Every file read
# one bounded way"). Usage: bench/readers.sh [SKYCTL] ; prints a Markdown table.
set -u
S=${1:-target/debug/skyctl}
S=$(realpath "$S")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
"$S" random s1-pico base >/dev/null
"$S" golden gen g >/dev/null
echo '{"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}' > r.json
export SKYCTL_REMOTE_CACHE=http://127.0.0.1:9
printf '[[command]]\nname = "a"\nrun = "true"\noutputs = ["o"]\n' > pipeline.toml

# make KIND PATH: put a /dev/zero link, a FIFO or a 3 GiB sparse file at PATH.
make() {
  rm -rf "$2"
  case $1 in
    zero) ln -s /dev/zero "$2" ;;
    fifo) mkfifo "$2" ;;
    # A golden keeps its header (24 values declared), the rest is a hole.
    sparse) case $2 in *.bin) head -1 g/q3k_matvec_output.bin > "$2" ;; esac
            truncate -s 3G "$2" ;;
  esac
}

# row LABEL TARGET ARGS...: TARGET is the path replaced; ARGS the command (X stands for it).
row() {
  local label=$1 target=$2; shift 2
  local cells=""
  for k in zero fifo sparse; do
    rm -rf ck c; cp -r base ck; cp -r g c
    make $k "$target"
    local args=()
    for a in "$@"; do args+=("${a//X/$target}"); done
    if [ "${args[0]}" = "env-ca" ]; then
      args=("${args[@]:1}")
      /usr/bin/time -f "%e %M" -o t timeout 60 env SKYCTL_REMOTE_CACHE_CA="$target" "$S" "${args[@]}" >/dev/null 2>e
    else
      /usr/bin/time -f "%e %M" -o t timeout 60 "$S" "${args[@]}" >o 2>e
    fi
    local rc=$?
    [ -n "${SHOW:-}" ] && echo "  $label $k: $(grep -v '^note:' e | grep -v pass | tail -2 | tr '\n' ' ' | cut -c1-200)" >&2
    read -r secs kb < <(tail -1 t)
    cells+=" $secs s, $(awk "BEGIN{printf \"%.1f\", $kb/1024}") MiB, exit $rc |"
  done
  echo "| $label |$cells"
}

echo "| reader (command) | /dev/zero | FIFO | 3 GiB sparse |"
echo "|---|---|---|---|"
row "checkpoint config: \`ask ck\` with \`encoder/config.json\`" ck/encoder/config.json ask ck --request r.json
row "tokenizer: \`convert ck\` with \`tokenizer/tokenizer.json\`" ck/tokenizer/tokenizer.json convert ck out.gguf
row "request: \`ask ck --request X\`" req ask base --request X
row "cases: \`tune ck --cases X\`" cases tune base --cases X --tolerance 0.1 --out p.toml
row "cases: \`golden record ck --cases X\`" cases golden record base --cases X --out e.jsonl
row "prompts: \`calibrate ck --prompts X\`" prompts calibrate base cal.json --prompts X
row "calibration: \`quantize ck --calibration X\`" cal quantize base q.gguf --calibration X
row "policy: \`quantize ck --policy X\`" pol quantize base q.gguf --policy X
row "pipeline manifest: \`graph --manifest X\`" man graph --manifest X
row "CA bundle: \`SKYCTL_REMOTE_CACHE_CA=X status\`" ca env-ca status
row "PNGOLDEN1 golden: \`golden check G C\`, a golden" c/q3k_matvec_output.bin golden check c g
row "PNGOLDEN1 candidate: \`golden check G C\`, a candidate" c/q3k_matvec_output.bin golden check g c
row "model: \`inspect X\`" m.gguf inspect X
