# What zsh's completion offers for a command line, as the interactive shell computes it:
#   zsh -f zsh_complete.zsh FUNCTION_DIR 'tune checkpoints ls --trial '
# Starts `zsh -f -i` on a pseudo-terminal (zsh/zpty), loads compinit with FUNCTION_DIR first on
# fpath, types the line and a TAB, and prints every match the completion functions added, each
# as {match}, on one line. compadd is wrapped to print its matches; \002 and \003 around them
# (printed by compprefuncs/comppostfuncs) tell them apart from the terminal's echo.
zmodload zsh/zpty || exit 2
typeset -F SECONDS
zpty z zsh -f -i
zpty -w z "PROMPT=''; RPROMPT=''; unsetopt beep"
zpty -w z "fpath=(${(q)1} \$fpath); autoload -Uz compinit; compinit -u -d ${(q)1}/.zcompdump"
zpty -w z "zstyle ':completion:*' list-grouped false; zstyle ':completion:*' insert-tab false"
zpty -w z "bindkey '^I' complete-word"
zpty -w z $'__cbegin() { print -n \$\'\\002\'; }; __cend() { print -n \$\'\\003\'; exit; }'
zpty -w z 'compprefuncs=(__cbegin); comppostfuncs=(__cend)'
# -O, -A, -D only fill arrays (the completion system's own filtering): passed through.
zpty -w z 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a __m; builtin compadd -A __m "$@"; local __w; for __w in $__m; print -rn -- "{$__w}"; builtin compadd "$@"; }'
zpty -n -w z "$2"$'\t'
local out="" line
float deadline=$(( SECONDS + 20 ))
while (( SECONDS < deadline )); do
  if zpty -r -t z line 2>/dev/null; then
    out+=$line
    [[ $out == *$'\003'* ]] && break
  else
    sleep 0.05
  fi
done
zpty -d z
[[ $out == *$'\002'*$'\003'* ]] || { print -u2 "no completion ran for: $2"; exit 1 }
out=${out##*$'\002'}
print -r -- ${out%%$'\003'*}
