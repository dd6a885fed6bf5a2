# config.sh - `relibra config`: effective YAML, --set, presets, errors.
. "$RLB_TOP/tests/cli/lib.sh"

run config -h
expect_status 0
head -n 1 out | grep -qx 'usage: relibra config \[-h\] \[-c CONFIG\] \[--set KEY=VALUE\]...' ||
	fail "usage line"
grep -qx '       relibra config --presets' out || fail "the --presets usage line"

run config -c "$CONFIGS/tiny-2x2.yaml" --set parallel.micro_batch_tokens=1024
expect_status 0
expect_empty err
expect_out "  micro_batch_tokens: 1024"
expect_out "  experts: 16"
expect_out "  ep_size: 4"
expect_out "  pack: in-order"

# the output is a loadable config that prints the same
cp out effective.yaml
run config -c effective.yaml
expect_status 0
cmp -s out effective.yaml || fail "printing the printed config changed it"

# --set alone, with presets
run config --set model.preset=deepseek-v3 --set cluster.preset=h200-8x8
expect_status 0
expect_out "  experts: 256"
expect_out "  hbm_gbps: 3800"
expect_out "  ep_size: 64"

# a section's preset replaces the section: after a --set of one of its
# keys it is an error that names that key, not a silent drop
run config -c "$CONFIGS/tiny-2x2.yaml" --set model.experts=64 --set model.preset=olmoe
expect_status 1
expect_empty out
expect_err "relibra config: --set 'model.preset=olmoe': the preset replaces the model section, and with it the earlier --set 'model.experts=64': give 'model.preset' first"
run config --set model.preset=olmoe --set cluster.nodes=2 --set model.topk=4 --set cluster.preset=h100-8x8
expect_status 1
expect_err "--set 'cluster.preset=h100-8x8': the preset replaces the cluster section, and with it the earlier --set 'cluster.nodes=2'"
# the preset first, or another section's key before it, or two presets
run config -c "$CONFIGS/tiny-2x2.yaml" --set model.preset=olmoe --set model.experts=64
expect_status 0
expect_out "  experts: 64"
run config --set parallel.micro_batch_tokens=1024 --set model.preset=mixtral-8x7b --set model.preset=olmoe \
	--set cluster.preset=h100-1x8 --set parallel.ep_size=8
expect_status 0
expect_out "  experts: 64"

run config -c "$CONFIGS/tiny-2x2.yaml" --set model.expers=16
expect_status 1
expect_empty out
expect_err "relibra config: --set 'model.expers=16': unknown key 'model.expers' (did you mean 'model.experts'?)"

run config -c "$CONFIGS/tiny-2x2.yaml" --set parallel.micro_batch_tokens=lots
expect_status 1
expect_err "relibra config: --set 'parallel.micro_batch_tokens=lots': expected an integer for 'parallel.micro_batch_tokens', got 'lots'"

run config -c missing.yaml
expect_status 1
expect_err "relibra config: cannot open config 'missing.yaml': No such file or directory"

# an error in a file shows file:line:col, the line and a caret
printf 'model:\n  preset: olmoe\n  topk: many\n' > bad.yaml
run config -c bad.yaml
expect_status 1
cat > want <<'W'
relibra config: bad.yaml:3:9: expected an integer for 'model.topk', got 'many'
    topk: many
          ^
W
cmp -s err want || { cat err; fail "unexpected error text"; }

run config --presets
expect_status 0
for p in qwen3-30b-a3b qwen3-235b-a22b deepseek-v3 mixtral-8x7b olmoe \
	h100-1x8 h100-4x8 h100-8x8 h200-8x8 tiny-2x2 qwen3-30b-a3b-h100-1x8; do
	grep -qx "  $p" out || fail "--presets lacks $p"
done
# the built-in list, whatever the config: -c and --set are refused, not ignored
run config --presets -c "$CONFIGS/tiny-2x2.yaml"
expect_status 2
expect_empty out
expect_err "relibra config: --presets takes no -c"
run config --set model.preset=olmoe --presets
expect_status 2
expect_empty out
expect_err "relibra config: --presets takes no --set"
# -c NAME: a built-in config when no file NAME exists, the same as its file
run config -c tiny-2x2
expect_status 0
expect_empty err
cp out builtin.yaml
run config -c "$CONFIGS/tiny-2x2.yaml"
cmp -s out builtin.yaml || fail "config -c tiny-2x2 differs from configs/tiny-2x2.yaml"
run config -c tiny-2x3
expect_status 1
expect_err "relibra config: cannot open config 'tiny-2x3': No such file or directory (built-in config 'tiny-2x2'?)"
# a file of that name comes first
printf 'model: {preset: nope}\n' > tiny-2x2
run config -c tiny-2x2
expect_status 1
expect_err "unknown model preset 'nope'"
rm tiny-2x2

run config --bogus
expect_status 2
expect_err "unknown option '--bogus'"
expect_err "usage: relibra config"

run config extra
expect_status 2
expect_err "unexpected argument 'extra'"

run config --set
expect_status 2
expect_err "option '--set' needs a value"
# every key printed is documented in relibra.yaml(5) with the same default
# (the model's shape comes from a preset here, so only its names are checked)
run config --set model.preset=olmoe
expect_status 0
man5="$RLB_TOP/man/relibra.yaml.5"
section=
while IFS= read -r line; do
	case $line in
	'#'*) continue ;;
	[a-z]*:) section=${line%:}; continue ;;
	esac
	key=${line%%:*}
	key=${key#  }
	value=${line#*: }
	[ "$value" = '""' ] && value=empty
	grep -q "^\.It Ic $key Pq " "$man5" || fail "relibra.yaml.5 lacks key '$section.$key'"
	# README's Configuration section lists every key of its section
	[ "$key" = name ] ||
		sed -n "/^- \`$section\`:/,/^[^ ]/p" "$RLB_TOP/README.md" | tr ',.' '  ' |
		grep -qw -- "$key" || fail "README.md's '$section' list lacks '$key'"
	case $section.$key in
	model.*|parallel.ep_size) continue ;;
	esac
	grep -q "^\.It Ic $key Pq .*default $value\$" "$man5" ||
		fail "relibra.yaml.5 does not give '$section.$key' the default '$value'"
done < out

# -0 is 0, printed so
run config -c tiny-2x2 --set balancer.migration_weight=-0 --set cluster.rdma_latency_us=-0.0
expect_status 0
expect_out "  migration_weight: 0"
expect_out "  rdma_latency_us: 0"
grep -q -- ": -0$" out && fail "config printed a negative zero"
# An EP size beyond a one-GPU cluster: "1 GPU", in the singular.
run config -c tiny-2x2 --set cluster.nodes=1 --set cluster.gpus_per_node=1 --set parallel.ep_size=2
expect_status 1
expect_err "relibra config: --set 'parallel.ep_size=2': 'parallel.ep_size' 2 exceeds the cluster's 1 GPU ('cluster.nodes' 1 x 'cluster.gpus_per_node' 1)"
# --set without KEY=VALUE is a usage error, like every other bad option.
run config --set model.experts
expect_status 2
expect_err "relibra config: --set 'model.experts': expected KEY=VALUE"
# A file of another kind given as the config is named as such, not by the
# first byte or key that fails as YAML.
run capture -c tiny-2x2 --synthetic -o t.rrt
expect_status 0
run plan -c tiny-2x2 --policy static -o p.rlp --summary s.json t.rrt
expect_status 0
run config -c t.rrt
expect_status 1
expect_err "relibra config: 't.rrt' is a relibra trace, not a YAML config"
run plan -c p.rlp t.rrt
expect_status 1
expect_err "relibra plan: 'p.rlp' is a relibra plan, not a YAML config"
run config -c s.json
expect_status 1
expect_err "relibra config: 's.json' is a relibra result (the JSON of plan --summary or train-step -o), not a YAML config"
run config -c "$FIXTURES/hf/olmoe.json"
expect_status 1
expect_err "is a Hugging Face config.json, not a YAML config: 'relibra config --from-hf FILE' makes a config from it"
printf '\037\213\010\000\000\000\000\000\000\003compressed' > c.yaml.gz	# a gzip header
run config -c c.yaml.gz
expect_status 1
expect_err "relibra config: 'c.yaml.gz' is gzip-compressed, not a YAML config: decompress it first"
# torch.save and pickle.dump files, named as such wherever they are given
printf 'PK\003\004\024\000\000\000\010\000archive/data.pkl' > w.pt
run config -c w.pt
expect_status 1
expect_err "relibra config: 'w.pt' is a zip archive, such as a torch.save or numpy.savez file, not a YAML config"
run inspect w.pt
expect_status 1
expect_err "the file is a zip archive, such as a torch.save or numpy.savez file, not a relibra trace"
printf '\200\004\225\005\000\000\000\000\000\000\000}\224.' > w.pkl
run config -c w.pkl
expect_status 1
expect_err "relibra config: 'w.pkl' is a Python pickle, such as a legacy torch.save file, not a YAML config"
mkdir models
cp t.rrt models/traced.yaml
printf 'model: {preset: traced}\n' > uses-trace.yaml
run config -c uses-trace.yaml
expect_status 1
expect_err "relibra config: './models/traced.yaml' is a relibra trace, not a YAML preset"
# UTF-16 and a byte order mark are YAML still
if command -v iconv > /dev/null 2>&1; then
	iconv -f UTF-8 -t UTF-16 "$CONFIGS/tiny-2x2.yaml" > c16.yaml
	run config -c c16.yaml
	expect_status 0
fi
exit 0
