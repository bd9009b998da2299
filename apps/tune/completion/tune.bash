# bash completion for tune: subcommands, each one's flags and values, experiment names (the
# directories under the storage path that hold an experiment_state.json) and trial ids (from
# the experiment's trial_<id>_... directories). Reads only directory listings: no tune process.
# Installed as share/bash-completion/completions/tune; or `source` this file.

# The storage path: --storage-path on the line, else $TUNE_STORAGE_PATH, else ~/tune_results.
_tune_storage() {
  local i w
  for ((i = 1; i < ${#COMP_WORDS[@]}; i++)); do
    w=${COMP_WORDS[i]}
    if [[ $w == --storage-path && $i -ne $COMP_CWORD ]]; then
      w=${COMP_WORDS[i + 1]}
      [[ $w == "=" ]] && w=${COMP_WORDS[i + 2]}
      [[ -n $w && $((i + 1)) -ne $COMP_CWORD ]] && { echo "${w/#\~/$HOME}"; return; }
    elif [[ $w == --storage-path=?* ]]; then
      w=${w#--storage-path=}
      echo "${w/#\~/$HOME}"
      return
    fi
  done
  echo "${TUNE_STORAGE_PATH:-$HOME/tune_results}"
}

# Experiment names under the storage path starting with $1.
_tune_experiments() {
  local root d name
  root=$(_tune_storage)
  for d in "$root"/*/; do
    [[ -f ${d}experiment_state.json ]] || continue
    name=${d%/}
    name=${name##*/}
    [[ $name == "$1"* ]] && COMPREPLY+=("$name")
  done
}

# The experiment the line names: its first word after the subcommand that is neither a flag nor
# a flag's value (the word being completed left out).
_tune_line_experiment() {
  local i w skip=0
  for ((i = _tune_first_arg; i < ${#COMP_WORDS[@]}; i++)); do
    w=${COMP_WORDS[i]}
    if ((i == COMP_CWORD)); then  # the word being completed (maybe an option's value)
      [[ $w == "=" ]] || skip=0
      continue
    fi
    if ((skip)); then
      skip=0
      [[ $w == "=" ]] && skip=1
      continue
    fi
    case $w in
      --storage-path | --trial | --metric | --mode | --top | --format | --timeout | -o | --output) skip=1 ;;
      -*) ;;
      *) echo "$w" && return ;;
    esac
  done
}

# The line's experiment dir, else the most recently written one under the storage path, as tune
# itself picks it.
_tune_experiment_dir() {
  local root exp f newest=""
  root=$(_tune_storage)
  exp=$(_tune_line_experiment)
  exp=${exp/#\~/$HOME}
  if [[ -n $exp ]]; then
    if [[ -f $exp/experiment_state.json ]]; then echo "$exp"; else echo "$root/$exp"; fi
    return
  fi
  for f in "$root"/*/experiment_state.json; do
    [[ -f $f ]] || continue
    [[ -z $newest || $f -nt $newest ]] && newest=$f
  done
  [[ -n $newest ]] && echo "${newest%/experiment_state.json}"
}

# Trial ids (the NNNNN of trial_NNNNN_...) of the line's experiment starting with $1.
_tune_trials() {
  local dir d id
  dir=$(_tune_experiment_dir)
  [[ -n $dir ]] || return
  for d in "$dir"/trial_*/; do
    id=${d%/}
    id=${id##*/trial_}
    id=${id%%_*}
    [[ $id =~ ^[0-9]+$ && $id == "$1"* ]] && COMPREPLY+=("$id")
  done
}

# Files named *.yaml / *.yml and directories starting with $1.
_tune_yaml_files() {
  local f
  compopt -o filenames 2>/dev/null
  while IFS= read -r f; do
    if [[ -d $f ]]; then
      COMPREPLY+=("$f")
    elif [[ $f == *.yaml || $f == *.yml ]]; then
      COMPREPLY+=("$f")
    fi
  done < <(compgen -f -- "$1")
}

_tune_words() {  # the words of $1 that start with $2
  local w
  for w in $1; do
    [[ $w == "$2"* ]] && COMPREPLY+=("$w")
  done
}

_tune() {
  COMPREPLY=()
  local cur=${COMP_WORDS[COMP_CWORD]} prev="" cmd="" i w
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  # --opt=value is split at '=' by bash (COMP_WORDBREAKS): treat "--opt" "=" "val" as a value.
  if [[ $cur == "=" ]]; then
    cur=""
  elif [[ $prev == "=" ]] && ((COMP_CWORD > 1)); then
    prev=${COMP_WORDS[COMP_CWORD - 2]}
  fi

  # The subcommand (two words for checkpoints ls|best) and where its arguments start.
  local _tune_first_arg=1
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    [[ $w == -* ]] && continue
    if [[ -z $cmd ]]; then
      cmd=$w
      _tune_first_arg=$((i + 1))
      [[ $cmd == checkpoints ]] || break
    else
      cmd="$cmd $w"
      _tune_first_arg=$((i + 1))
      break
    fi
  done

  case $cmd in
    "")
      if [[ $cur == -* ]]; then _tune_words "-h --help --version" "$cur"; else
        _tune_words "run validate status ls checkpoints report export stop" "$cur"
      fi
      return ;;
    checkpoints)
      if [[ $cur == -* ]]; then _tune_words "-h --help" "$cur"; else _tune_words "ls best" "$cur"; fi
      return ;;
  esac

  # The value of the option before the cursor.
  case $prev in
    --resume) _tune_words "never auto must errored auto+errored restart-errored" "$cur"; return ;;
    --mode) _tune_words "min max" "$cur"; return ;;
    --format)
      case $cmd in
        "checkpoints ls") _tune_words "table json csv" "$cur" ;;
        export) _tune_words "csv json jsonl" "$cur" ;;
        *) _tune_words "table json" "$cur" ;;
      esac
      return ;;
    --trial) _tune_trials "$cur"; return ;;
    --storage-path | --restore-from)
      compopt -o filenames 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -d -- "$cur")
      return ;;
    -o | --output)
      compopt -o filenames 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return ;;
    --name | --set | --max-concurrent | --columns | --metric | --top | --timeout) return ;;
  esac

  local flags
  case $cmd in
    run) flags="--resume --restore-from --name --storage-path --set --max-concurrent --columns
                --quiet -q --verbose -v -h --help" ;;
    validate) flags="--set --name --storage-path --format -h --help" ;;
    status) flags="--storage-path --format -h --help" ;;
    ls) flags="--storage-path --format -h --help" ;;
    "checkpoints ls") flags="--storage-path --trial --metric --mode --top --include-errored
                             --format -h --help" ;;
    "checkpoints best") flags="--storage-path --metric --mode --include-errored -h --help" ;;
    report) flags="--storage-path --output -o -h --help" ;;
    export) flags="--storage-path --format --all-results -h --help" ;;
    stop) flags="--storage-path --trial --timeout -h --help" ;;
    *) return ;;
  esac
  if [[ $cur == -* ]]; then
    _tune_words "$flags" "$cur"
    return
  fi
  case $cmd in
    run | validate) _tune_yaml_files "$cur" ;;
    ls) ;;
    *)
      [[ -n $(_tune_line_experiment) ]] && return  # one experiment per command
      if [[ $cur == */* || $cur == .* || $cur == "~"* ]]; then
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
      else
        _tune_experiments "$cur"
      fi ;;
  esac
}

complete -F _tune tune
