#!/bin/sh
# Prints the OPENBLAS_CORETYPE under which a command runs fastest, of
# SkylakeX, Cooperlake, Zen, Haswell and "-" (unset: OpenBLAS's own pick).
# Debian's PyTorch 1.13 runs its GEMMs on OpenBLAS, whose pick for a CPU it
# does not know (a VM's AMD EPYC) can be a slow generic kernel; the
# benchmark scripts time each core type at a small step count first and
# run the full comparison under the fastest.
#
#   ct=$(docs/bench/torch113_coretype.sh FIELD COMMAND [ARGS...])
#
# FIELD is the key of the key=value in the command's last output line to
# maximise (samples_per_s, tokens_per_s). Every timing goes to stderr as
# "coretype=CT FIELD=V". Prints "-" when no core type ran.
set -eu
field=$1
shift
best=-
bestv=0
for ct in SkylakeX Cooperlake Zen Haswell -; do
	v=$(if [ "$ct" = - ]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE=$ct; fi
		"$@" 2>/dev/null | tail -n 1 | tr ' \t' '\n\n' | awk -F= -v k="$field" '$1 == k {print $2}' | tail -n 1) || v=
	echo "coretype=$ct $field=${v:-failed}" >&2
	if [ -n "$v" ] && awk -v a="$v" -v b="$bestv" 'BEGIN { exit !(a > b) }'; then
		best=$ct
		bestv=$v
	fi
done
echo "$best"
