#!/usr/bin/env bash
# Turn the PyInstaller folder (dist/SpecChat, from packaging/build.sh) into a Debian package:
# dist/specchat_<version>_<arch>.deb, for `sudo apt install ./dist/specchat_<version>_<arch>.deb`.
#
#     bash packaging/build-deb.sh [--build] [--vulkan MODULE]
#
# --build: run packaging/build.sh first. --vulkan MODULE (libggml-vulkan.so from
# packaging/build_vulkan_module.sh): build `specchat-vulkan` instead, the same bundle with llama.cpp's
# Vulkan backend module beside its CPU modules, so one package uses any GPU with a Vulkan driver (NVIDIA,
# AMD, Intel) and the CPU where there is none; it replaces `specchat` (Conflicts/Replaces/Provides).
#
# Layout: the bundle in /opt/specchat; /usr/bin/specchat (every command, the window by default) and
# /usr/bin/specchat-gui (the menu entry's command) link to it; the .desktop file, the icons (every
# hicolor size and the SVG) and the AppStream metainfo go where desktops look for them. No
# maintainer scripts: Debian's triggers refresh the icon cache and the menu.
#
# Depends: is derived from the bundle (packaging/deb_depends.py: ldd + dpkg-query + dpkg-shlibdeps),
# so it names the system libraries the bundle needs but does not carry; the glibc it needs decides
# the distributions the description claims ("Debian >= 12, Ubuntu >= 24.04", deb_depends.py
# --runs-on). /usr/share/doc/specchat/copyright (DEP-5) and licenses/ list the licence of everything
# the bundle carries (packaging/licenses.py, run with the Python that built the bundle: $PYTHON, else
# .venv/bin/python). Maintainer (and Homepage, if any) come from pyproject.toml's [project]. Needs
# dpkg-dev; the validators (desktop-file-utils, appstream) run when installed, and are installed when root.
set -euo pipefail
cd "$(dirname "$0")/.."
APP_ID=org.specchat.SpecChat
BUNDLE=dist/SpecChat

VULKAN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; packaging/build.sh ;;
    --vulkan) VULKAN=$2; shift 2 ;;
    *) echo "build-deb.sh: unknown option $1 (--build, --vulkan MODULE)" >&2; exit 2 ;;
  esac
done
[ -z "$VULKAN" ] || [ -f "$VULKAN" ] || { echo "build-deb.sh: --vulkan $VULKAN: no such module (packaging/build_vulkan_module.sh builds it)" >&2; exit 2; }
[ -x "$BUNDLE/SpecChat" ] || { echo "build-deb.sh: $BUNDLE is missing; run packaging/build.sh first (or pass --build)" >&2; exit 2; }
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "build-deb.sh: $PY is missing: the licences are read from the Python that built the bundle; set PYTHON" >&2; exit 2; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  want=""
  command -v dpkg-shlibdeps >/dev/null || want="$want dpkg-dev"
  command -v desktop-file-validate >/dev/null || want="$want desktop-file-utils"
  command -v appstreamcli >/dev/null || want="$want appstream"
  # shellcheck disable=SC2086 # one word per package
  [ -z "$want" ] || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $want >/dev/null) \
    || echo "build-deb.sh: could not install$want" >&2
fi
for tool in dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "build-deb.sh: $tool is missing: apt-get install dpkg-dev" >&2; exit 2; }
done

start=$(date +%s)
# The version, the first maintainer (else author) as "Name <email>", the homepage ("" when pyproject.toml names none).
{ read -r version; read -r maintainer; read -r homepage; } < <(python3 -c '
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
people = [x for x in p.get("maintainers", []) + p.get("authors", []) if x.get("name") and x.get("email")]
urls = {k.lower(): v for k, v in p.get("urls", {}).items()}
print(p["version"])
print("{name} <{email}>".format(**people[0]) if people else "")
print(urls.get("homepage", ""))
')
[ -n "$maintainer" ] || { echo "build-deb.sh: pyproject.toml names no maintainer (or author) with an email" >&2; exit 2; }
arch=$(dpkg --print-architecture)
pkg=specchat${VULKAN:+-vulkan}
deb=dist/${pkg}_${version}_${arch}.deb
root=build/deb/root
rm -rf build/deb && mkdir -p "$root/DEBIAN" "$root/opt" "$root/usr/bin" "$root/usr/share/applications" \
  "$root/usr/share/metainfo" "$root/usr/share/icons" "$root/usr/share/doc/$pkg"

cp -a "$BUNDLE" "$root/opt/specchat"
if [ -n "$VULKAN" ]; then  # ggml loads it at start from the CPU modules' folder (app/llama_backend/backend_modules.py)
  install -m 644 "$VULKAN" "$root/opt/specchat/_internal/llama_cpp/lib/libggml-vulkan.so"
fi
ln -s ../../opt/specchat/SpecChat "$root/usr/bin/specchat"
ln -s ../../opt/specchat/SpecChat "$root/usr/bin/specchat-gui"
install -m 644 "resources/$APP_ID.desktop" "$root/usr/share/applications/"
install -m 644 "resources/$APP_ID.metainfo.xml" "$root/usr/share/metainfo/"
cp -r resources/icons/hicolor "$root/usr/share/icons/"
echo "==> licences of what the bundle carries"
"$PY" packaging/licenses.py "$BUNDLE" --out "$root/usr/share/doc/$pkg"
chmod -R u=rwX,go=rX "$root"

echo "==> deriving Depends from the bundle"
depends=$(python3 packaging/deb_depends.py "$root/opt/specchat")  # with the Vulkan module: libvulkan1
runs_on=$(python3 packaging/deb_depends.py --runs-on "$depends")
echo "==> runs on $runs_on (decided by the glibc its Depends needs)"
installed_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
recommends=hicolor-icon-theme replaces="" vulkan_text=""
if [ -n "$VULKAN" ]; then  # one SpecChat at a time: the Vulkan package takes the plain one's place
  recommends="$recommends, mesa-vulkan-drivers"
  replaces=$'Conflicts: specchat\nReplaces: specchat\nProvides: specchat\n'
  vulkan_text=$'\n .\n This build adds the Vulkan backend of llama.cpp: both models run on any GPU\n with a Vulkan driver (NVIDIA, AMD, Intel), and on the CPU where there is none.'
fi
cat > "$root/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_kb
Depends: $depends
Recommends: $recommends
${replaces}Section: utils
Priority: optional
${homepage:+Homepage: $homepage
}Description: chat with local LLMs, with speculative decoding made visible
 SpecChat runs a large target model and a small draft model through llama.cpp: the draft
 proposes tokens, the target verifies them in one batched pass, and every token in the chat is
 coloured by its fate. Includes live statistics, a memory meter for both models, a model picker
 and a side-by-side comparison of plain and speculative decoding.
 .
 Runs on $runs_on ($arch$([ "$arch" = amd64 ] && echo ', a CPU with SSE4.2: x86-64-v2')). The package
 carries Python, Qt and llama.cpp in /opt/specchat; their licences are in /usr/share/doc/$pkg.$vulkan_text
EOF

if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$root/usr/share/applications/$APP_ID.desktop"
  echo "desktop-file-validate: OK"
fi
if command -v appstreamcli >/dev/null; then
  appstreamcli validate --no-net "$root/usr/share/metainfo/$APP_ID.metainfo.xml"
fi

mkdir -p dist
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
dpkg-deb --info "$deb" | sed -n '/Package:/,/Description:/p' | grep -v '^ Description'
echo "==> $deb: $(du -h "$deb" | cut -f1) (installed $(( installed_kb / 1024 )) MB), built in $(( $(date +%s) - start )) s"
