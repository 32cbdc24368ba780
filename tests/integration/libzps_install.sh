#!/usr/bin/env bash
# libzps as an installed library (docs/client.md):
#   - `cmake --install BUILD --prefix P` puts libzps.so.ABI (and its links)
#     in P's library folder, zps.h and errors.h in P/include/zps and zps.pc
#     in the library folder's pkgconfig/;
#   - the library exports exactly the functions the headers declare with
#     ZPS_API, each tagged with its release's version node (ZPS_1, or
#     ZPS_1.1 for the staged exchange), and nothing else;
#   - each header compiles alone, as C11 and as C++, with -Wall -Wextra
#     -pedantic -Werror, from P only;
#   - docs/client.md's example (its ```c block) builds with `pkg-config
#     --cflags --libs zps` from P alone (no source tree on any path), runs
#     against a real zps-server with P's libzps.so.ABI, and fits its line:
#     a = 3, b = -1 to 4 places (the least-squares solution, exact here), and
#     reports the wrong-size pull as the server's refusal, ZPS_ESIZE;
#   - the same example builds with CMake from P alone (find_package(zps 1),
#     zps::zps) and fits its line against a server of its own.
#
# usage: libzps_install.sh SOURCE_DIR BUILD_DIR ZPS_SERVER_BIN
set -euo pipefail
src=$1
build=$2
server_bin=$3
. "$(dirname "$0")/lib.sh"
command -v pkg-config >/dev/null || { echo "skipped: no pkg-config"; exit 77; }

p=$dir/prefix
cmake --install "$build" --prefix "$p" >"$dir/install.log" 2>&1 ||
    fail "cmake --install: $(tail -5 "$dir/install.log")"
abi=$(sed -n 's/^#define ZPS_ABI_VERSION \([0-9]*\)$/\1/p' "$src/include/zps/zps.h")
[ -n "$abi" ] || fail "no ZPS_ABI_VERSION in zps.h"
so=$(find "$p" -name "libzps.so.$abi" | head -1)
[ -n "$so" ] || fail "no libzps.so.$abi under $p: $(find "$p" -name 'libzps*')"
libdir=$(dirname "$so")
[ -L "$libdir/libzps.so" ] || fail "no libzps.so link in $libdir"
[ "$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')" = "libzps.so.$abi" ] ||
    fail "SONAME: $(readelf -d "$so" | grep SONAME)"
for h in zps.h errors.h; do [ -f "$p/include/zps/$h" ] || fail "no $p/include/zps/$h"; done
[ -f "$libdir/pkgconfig/zps.pc" ] || fail "no $libdir/pkgconfig/zps.pc"

# --- the exports: the headers' ZPS_API functions, tagged ZPS_1 or ZPS_1.1, and no more ---
sed -n 's/^ZPS_API [^(]*[ *]\(zps_[a-z_0-9]*\)(.*/\1/p' "$p"/include/zps/*.h | sort >"$dir/declared"
[ "$(wc -l <"$dir/declared")" -ge 20 ] || fail "only $(wc -l <"$dir/declared") declarations found"
nm -D --defined-only "$so" | awk '$3 != "ZPS_1" && $3 != "ZPS_1.1" { print $3 }' |
    sort >"$dir/exported"
grep -v '@@ZPS_1$' "$dir/exported" | grep -v '@@ZPS_1\.1$' &&
    fail "exports without a ZPS_1 or ZPS_1.1 tag (above)"
[ "$(grep -c '@@ZPS_1\.1$' "$dir/exported")" -eq 3 ] ||
    fail "ZPS_1.1 should hold the three staged-exchange functions: $(grep '@@ZPS_1\.1' "$dir/exported")"
sed 's/@@ZPS_1\(\.1\)\{0,1\}$//' "$dir/exported" >"$dir/exported.names"
diff "$dir/declared" "$dir/exported.names" >"$dir/exports.diff" ||
    fail "exported (>) against declared (<): $(cat "$dir/exports.diff")"

# --- each header alone, C11 and C++, from the prefix only ---
for h in zps.h errors.h; do
    printf '#include <zps/%s>\nint zps_header_alone;\n' "$h" >"$dir/alone.c"
    cc -std=c11 -Wall -Wextra -pedantic -Werror -fsyntax-only -I"$p/include" "$dir/alone.c" ||
        fail "zps/$h does not compile alone as C11"
    if command -v c++ >/dev/null; then
        c++ -std=c++11 -Wall -Wextra -pedantic -Werror -fsyntax-only -x c++ -I"$p/include" \
            "$dir/alone.c" || fail "zps/$h does not compile alone as C++"
    fi
done

# --- docs/client.md's example, from the prefix alone ---
awk '/^```c$/ { on = 1; n++; next } /^```/ { on = 0 } on && n == 1' "$src/docs/client.md" \
    >"$dir/fit.c"
[ -s "$dir/fit.c" ] || fail "no \`\`\`c block in docs/client.md"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs zps) || fail "pkg-config zps"
[[ $flags != *"$src"* && $flags != *"$build"* ]] || fail "pkg-config points into the tree: $flags"
# A sanitizer build's library needs its runtime loaded first: so does the example.
san=""
readelf -d "$so" | grep -q 'libasan' && san+=" -fsanitize=address"
readelf -d "$so" | grep -q 'libubsan' && san+=" -fsanitize=undefined"
# shellcheck disable=SC2086 # flags are words
(cd "$dir" && cc -std=c11 -Wall -Wextra -Werror $san -o fit fit.c $flags) ||
    fail "the example does not build with: $flags"
start_server fit --workers 1 --mode bsp --lr 0.5
LD_LIBRARY_PATH=$libdir "$dir/fit" "$ep" >"$dir/fit.out" 2>"$dir/fit.err" ||
    fail "the example exited $?: $(cat "$dir/fit.out" "$dir/fit.err")"
LD_LIBRARY_PATH=$libdir ldd "$dir/fit" | grep -q "libzps.so.$abi => $libdir/libzps.so.$abi" ||
    fail "the example did not load the installed library: $(LD_LIBRARY_PATH=$libdir ldd "$dir/fit")"
grep -qx 'a = 3.0000, b = -1.0000' "$dir/fit.out" || fail "the example's fit: $(cat "$dir/fit.out")"
want="^pull of 3 values: ZPS_EREMOTE, the server's ZPS_ESIZE: $ep: .*2 elements"
grep -q "$want" "$dir/fit.out" ||
    fail "the wrong-size pull: $(cat "$dir/fit.out")"

# --- the same example through CMake's package, from the prefix alone ---
mkdir -p "$dir/cm"
cp "$dir/fit.c" "$dir/cm/"
cat >"$dir/cm/CMakeLists.txt" <<'CMEOF'
cmake_minimum_required(VERSION 3.16)
project(fit C)
find_package(zps 1 REQUIRED)
add_executable(fit fit.c)
target_link_libraries(fit PRIVATE zps::zps)
CMEOF
# shellcheck disable=SC2086 # san is words
cmake -S "$dir/cm" -B "$dir/cm/b" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_C_FLAGS="$san" \
    >"$dir/cm.log" 2>&1 && cmake --build "$dir/cm/b" >>"$dir/cm.log" 2>&1 ||
    fail "find_package(zps) and zps::zps do not build the example: $(tail -20 "$dir/cm.log")"
! grep -q -- "-I$src\|-I$build" "$dir/cm/b/CMakeFiles/fit.dir/flags.make" ||
    fail "zps::zps points into the tree: $(cat "$dir/cm/b/CMakeFiles/fit.dir/flags.make")"
start_server cm --workers 1 --mode bsp --lr 0.5
LD_LIBRARY_PATH=$libdir "$dir/cm/b/fit" "$ep" >"$dir/cm.out" 2>&1 ||
    fail "the CMake-built example exited $?: $(cat "$dir/cm.out")"
grep -qx 'a = 3.0000, b = -1.0000' "$dir/cm.out" || fail "the CMake-built fit: $(cat "$dir/cm.out")"

echo "libzps_install: $(wc -l <"$dir/declared") functions exported as ZPS_1 and ZPS_1.1 from $so;" \
    "the example printed: $(tr '\n' ';' <"$dir/fit.out")"
