# Sourced by the scripts here: their one command-line check.
#
#   htp_script_args NAME USAGE MAX "$@"
#
# -h or --help prints the calling script's header comment (its lines from
# the second to the first `set -`) and exits 0; any other argument that
# starts with '-', or more than MAX others (MAX -1: any number), exits 2
# with NAME's message, before the script does any work.
htp_script_args() {
  local name=$1 usage=$2 max=$3 arg
  shift 3
  for arg in "$@"; do
    case $arg in
      -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      -*) echo "$name: unknown option '$arg' (usage: $usage; --help)" >&2; exit 2 ;;
    esac
  done
  if ((max >= 0 && $# > max)); then
    echo "$name: at most $max argument(s), got $# (usage: $usage; --help)" >&2
    exit 2
  fi
}
