#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses, so that scripts fetching another release
# (trixie for the images and the header check) go where the machine already goes.
#
#   scripts/debian_mirror.sh             the archive mirror, e.g. http://deb.debian.org/debian
#   scripts/debian_mirror.sh --security  the security mirror, or nothing when apt has none
#
# Read from /etc/apt/sources.list and /etc/apt/sources.list.d/*.list|*.sources (one-line and
# deb822 formats): the first enabled `deb` source whose suite is this machine's codename
# (/etc/os-release), or CODENAME-security. Exit status 1, with nothing printed, when apt names
# no such source (archive mirror only; a missing security source is not an error).
# Other scripts source this file and call debian_mirror / debian_security_mirror.

# Every enabled `deb` source as lines "URI SUITE", one per suite, in apt's reading order.
debian_apt_sources() {
  local etc="${DEBIAN_APT_ETC:-/etc/apt}" file
  for file in "$etc/sources.list" "$etc"/sources.list.d/*.list; do
    [[ -r "$file" ]] || continue
    # deb [option=value ...] URI SUITE COMPONENT...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$file" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
  done
  for file in "$etc"/sources.list.d/*.sources; do
    [[ -r "$file" ]] || continue
    awk '
      function flush(   u, s, nu, ns, i, j, uris, suites) {
        if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
          nu = split(uri, uris, " "); ns = split(suite, suites, " ")
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print uris[i], suites[j]
        }
        types = uri = suite = ""; enabled = "yes"
      }
      BEGIN { enabled = "yes" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        field = tolower($1); sub(/:$/, "", field); value = $0; sub(/^[^:]*:[ \t]*/, "", value)
        if (field == "types") types = value
        else if (field == "uris") uri = value
        else if (field == "suites") suite = value
        else if (field == "enabled") enabled = value
      }
      END { flush() }' "$file"
  done
}

debian_codename() {
  local os_release="${DEBIAN_OS_RELEASE:-/etc/os-release}"
  sed -n 's/^VERSION_CODENAME=//p' "$os_release" 2>/dev/null | tr -d '"' | head -1
}

# The archive mirror (no trailing slash); status 1 when apt names none.
debian_mirror() {
  local codename uri
  codename="$(debian_codename)"
  [[ -n "$codename" ]] || return 1
  uri="$(debian_apt_sources | awk -v c="$codename" '$2 == c { print $1; exit }')"
  [[ -n "$uri" ]] || return 1
  echo "${uri%/}"
}

# The security mirror (no trailing slash); status 1 when apt names none.
debian_security_mirror() {
  local codename uri
  codename="$(debian_codename)"
  [[ -n "$codename" ]] || return 1
  uri="$(debian_apt_sources |
    awk -v c="$codename" '$2 == c "-security" || $2 == c "/updates" { print $1; exit }')"
  [[ -n "$uri" ]] || return 1
  echo "${uri%/}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  case "${1:-}" in
    "") debian_mirror ;;
    --security) debian_security_mirror || true ;;
    *)
      sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
      exit 2
      ;;
  esac
fi
