// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"bytes"
	"debug/elf"
	"debug/macho"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// dep is one library a plugin needs.
type dep struct {
	name  string // as written in DT_NEEDED / LC_LOAD_DYLIB
	found string // where it was found; "" when not found
}

// formatResult is what checkFormat says: a reason (empty when the file
// may be loaded) and the dependencies.
type formatResult struct {
	reason, detail string
	deps           []dep
	// origin: the plugin's RUNPATH/RPATH names $ORIGIN (@loader_path),
	// so it must be loaded by its path, not through its descriptor
	// (pin_unix.go).
	origin bool
}

func depsString(ds []dep) string {
	if len(ds) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		if d.found != "" {
			parts[i] = d.name + " (" + d.found + ")"
		} else {
			parts[i] = d.name + " (not found)"
		}
	}
	return strings.Join(parts, ", ")
}

func missingDeps(ds []dep) []string {
	var out []string
	for _, d := range ds {
		if d.found == "" {
			out = append(out, d.name)
		}
	}
	return out
}

// checkFormatFor checks a file's format and architecture for goos/goarch
// (ELF on Linux, Mach-O on macOS) without loading it; checkFile uses
// checkFormatOf on the file it opened.
func checkFormatFor(path string, size int64, goos, goarch string) formatResult {
	if size == 0 {
		return formatResult{reason: "empty file (0 bytes)"}
	}
	f, err := os.Open(path)
	if err != nil {
		return formatResult{reason: "cannot open file", detail: err.Error()}
	}
	defer f.Close()
	return checkFormatOf(f, path, size, goos, goarch)
}

// checkFormatOf checks an open file (read with ReadAt only: the offset
// of a descriptor shared with a probe child is never moved).
func checkFormatOf(f *os.File, path string, size int64, goos, goarch string) formatResult {
	if size == 0 {
		return formatResult{reason: "empty file (0 bytes)"}
	}
	hdr := make([]byte, 64)
	n, _ := f.ReadAt(hdr, 0)
	hdr = hdr[:n]
	if goos == "darwin" {
		return checkMachO(f, path, hdr, size, goarch)
	}
	return checkELF(f, path, hdr, size, goarch)
}

var (
	elfMagic = []byte("\x7fELF")
	// Mach-O magics as the first four bytes of the file.
	machoMagics = [][]byte{
		{0xcf, 0xfa, 0xed, 0xfe}, // MH_MAGIC_64, little-endian
		{0xce, 0xfa, 0xed, 0xfe}, // MH_MAGIC, little-endian
		{0xca, 0xfe, 0xba, 0xbe}, // FAT_MAGIC
		{0xca, 0xfe, 0xba, 0xbf}, // FAT_MAGIC_64
	}
)

func isMachO(hdr []byte) bool {
	for _, m := range machoMagics {
		if bytes.HasPrefix(hdr, m) {
			return true
		}
	}
	return false
}

// notFormat names what a file that is not of the expected format is.
func notFormat(hdr []byte, want string) string {
	switch {
	case want == "ELF" && isMachO(hdr):
		return "not an ELF shared library: a Mach-O file (built for macOS)"
	case want == "Mach-O" && bytes.HasPrefix(hdr, elfMagic):
		return "not a Mach-O library: an ELF file (built for Linux)"
	case len(hdr) < 4:
		return fmt.Sprintf("not a%s %s shared library: only %d bytes", article(want), want, len(hdr))
	case looksText(hdr):
		s := strings.TrimSpace(string(hdr))
		if len(s) > 24 {
			s = s[:24]
		}
		return fmt.Sprintf("not a%s %s shared library: a text file (starts %q)", article(want), want, s)
	}
	return fmt.Sprintf("not a%s %s shared library (starts with bytes % x)", article(want), want, hdr[:4])
}

func article(s string) string {
	if s == "ELF" {
		return "n"
	}
	return ""
}

func looksText(b []byte) bool {
	for _, c := range b {
		if c == 0 || c == 0x7f || (c < 0x20 && c != '\n' && c != '\r' && c != '\t') {
			return false
		}
	}
	return true
}

// elfMachine maps GOARCH to the ELF machine a plugin must be built for.
var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386,
	"arm": elf.EM_ARM, "riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64,
	"s390x": elf.EM_S390, "loong64": elf.EM_LOONGARCH,
}

func goarchOfELF(m elf.Machine) string {
	for k, v := range elfMachine {
		if v == m {
			return k
		}
	}
	return "another architecture"
}

func checkELF(f *os.File, path string, hdr []byte, size int64, goarch string) formatResult {
	if !bytes.HasPrefix(hdr, elfMagic) {
		return formatResult{reason: notFormat(hdr, "ELF")}
	}
	if len(hdr) < 64 {
		return formatResult{reason: fmt.Sprintf("truncated: %d bytes, smaller than an ELF header", size)}
	}
	switch elf.Class(hdr[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
	case elf.ELFCLASS32:
		return formatResult{reason: "wrong class: a 32-bit ELF file (ELFCLASS32), this process is 64-bit"}
	default:
		return formatResult{reason: fmt.Sprintf("corrupt ELF header: class %d", hdr[elf.EI_CLASS])}
	}
	if elf.Data(hdr[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return formatResult{reason: fmt.Sprintf("wrong byte order: %v, this process is little-endian", elf.Data(hdr[elf.EI_DATA]))}
	}
	le := binary.LittleEndian
	typ := elf.Type(le.Uint16(hdr[16:]))
	mach := elf.Machine(le.Uint16(hdr[18:]))
	if want, ok := elfMachine[goarch]; ok && mach != want {
		return formatResult{reason: fmt.Sprintf("wrong architecture: built for %s (%v), this process is %s (%v)", goarchOfELF(mach), mach, goarch, want)}
	}
	if typ != elf.ET_DYN {
		return formatResult{reason: fmt.Sprintf("not a shared library (ELF type %v)", typ)}
	}
	phoff, shoff := le.Uint64(hdr[32:]), le.Uint64(hdr[40:])
	phend := phoff + uint64(le.Uint16(hdr[54:]))*uint64(le.Uint16(hdr[56:]))
	shend := shoff + uint64(le.Uint16(hdr[58:]))*uint64(le.Uint16(hdr[60:]))
	if need := max(phend, shend); need > uint64(size) {
		return formatResult{reason: fmt.Sprintf("truncated: the file is %d bytes, its headers need %d", size, need)}
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return formatResult{reason: "corrupt ELF file", detail: err.Error()}
	}
	for i, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Off+p.Filesz > uint64(size) {
			return formatResult{reason: fmt.Sprintf("truncated: segment %d ends at byte %d, the file is %d bytes", i, p.Off+p.Filesz, size)}
		}
	}
	needed, err := ef.ImportedLibraries()
	if err != nil {
		return formatResult{reason: "corrupt ELF dynamic section", detail: err.Error()}
	}
	origin := filepath.Dir(path)
	var rpath []string
	usesOrigin := false
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := ef.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				usesOrigin = usesOrigin || strings.Contains(d, "$ORIGIN") || strings.Contains(d, "${ORIGIN}")
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
				if d != "" {
					rpath = append(rpath, d)
				}
			}
		}
		if len(rpath) > 0 {
			break // DT_RUNPATH, when present, replaces DT_RPATH
		}
	}
	var deps []dep
	for _, n := range needed {
		deps = append(deps, dep{name: n, found: findELFLib(n, rpath, goarch)})
	}
	return formatResult{deps: deps, origin: usesOrigin}
}

// findELFLib looks for a DT_NEEDED library where the dynamic loader would:
// the plugin's RUNPATH/RPATH, /etc/ld.so.cache, the standard folders.
// LD_LIBRARY_PATH is not consulted (the check is advisory: dlopen decides).
func findELFLib(name string, rpath []string, goarch string) string {
	if strings.Contains(name, "/") {
		if fileExists(name) {
			return name
		}
		return ""
	}
	for _, d := range rpath {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	if p, ok := ldCache(goarch)[name]; ok {
		return p
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[goarch]
	dirs := []string{"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}
	if triplet != "" {
		dirs = append([]string{"/lib/" + triplet, "/usr/lib/" + triplet}, dirs...)
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

var (
	ldCacheOnce sync.Once
	ldCacheMap  map[string]string
)

// ldCache reads /etc/ld.so.cache (the glibc "1.1" format, alone or after
// the old one) into name -> path for this architecture. A missing or
// unreadable cache is an empty map.
func ldCache(goarch string) map[string]string {
	ldCacheOnce.Do(func() {
		b, err := os.ReadFile("/etc/ld.so.cache")
		if err != nil {
			ldCacheMap = map[string]string{}
			return
		}
		ldCacheMap = parseLDCache(b, goarch)
	})
	return ldCacheMap
}

func parseLDCache(b []byte, goarch string) map[string]string {
	out := map[string]string{}
	const newMagic = "glibc-ld.so.cache1.1"
	base := 0
	if bytes.HasPrefix(b, []byte("ld.so-1.7.0")) && len(b) >= 16 {
		n := int(binary.LittleEndian.Uint32(b[12:]))
		base = 16 + n*12
		base = (base + 7) &^ 7
	}
	if base+48 > len(b) || string(b[base:base+len(newMagic)]) != newMagic {
		return out
	}
	le := binary.LittleEndian
	nlibs := int(le.Uint32(b[base+20:]))
	want := map[string]int32{"amd64": 0x0300, "arm64": 0x0a00}[goarch]
	str := func(off uint32) string {
		o := base + int(off)
		if o < 0 || o >= len(b) {
			return ""
		}
		if i := bytes.IndexByte(b[o:], 0); i >= 0 {
			return string(b[o : o+i])
		}
		return ""
	}
	for i := 0; i < nlibs; i++ {
		e := base + 48 + i*24
		if e+24 > len(b) {
			break
		}
		flags := int32(le.Uint32(b[e:]))
		if want != 0 && flags&0xff00 != want {
			continue
		}
		k, v := str(le.Uint32(b[e+4:])), str(le.Uint32(b[e+8:]))
		if k != "" && v != "" {
			if _, dup := out[k]; !dup {
				out[k] = v
			}
		}
	}
	return out
}

// machoCPU maps GOARCH to the Mach-O CPU a plugin must be built for.
var machoCPU = map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}

func goarchOfMachO(c macho.Cpu) string {
	for k, v := range machoCPU {
		if v == c {
			return k
		}
	}
	return c.String()
}

func checkMachO(f *os.File, path string, hdr []byte, size int64, goarch string) formatResult {
	if !isMachO(hdr) {
		return formatResult{reason: notFormat(hdr, "Mach-O")}
	}
	want, known := machoCPU[goarch]
	var mf *macho.File
	if bytes.HasPrefix(hdr, []byte{0xca, 0xfe, 0xba}) {
		ff, err := macho.NewFatFile(f)
		if err != nil {
			return formatResult{reason: "corrupt or truncated Mach-O universal binary", detail: err.Error()}
		}
		var have []string
		for i := range ff.Arches {
			a := &ff.Arches[i]
			have = append(have, goarchOfMachO(a.Cpu))
			if !known || a.Cpu == want {
				mf = a.File
				if int64(a.Offset)+int64(a.Size) > size {
					return formatResult{reason: fmt.Sprintf("truncated: the %s slice ends at byte %d, the file is %d bytes", goarch, int64(a.Offset)+int64(a.Size), size)}
				}
				break
			}
		}
		if mf == nil {
			return formatResult{reason: fmt.Sprintf("wrong architecture: universal binary without %s (has %s)", goarch, strings.Join(have, ", "))}
		}
	} else {
		if bytes.HasPrefix(hdr, machoMagics[1]) {
			return formatResult{reason: "wrong class: a 32-bit Mach-O file, this process is 64-bit"}
		}
		var err error
		mf, err = macho.NewFile(f)
		if err != nil {
			return formatResult{reason: "corrupt or truncated Mach-O file", detail: err.Error()}
		}
		if known && mf.Cpu != want {
			return formatResult{reason: fmt.Sprintf("wrong architecture: built for %s, this process is %s", goarchOfMachO(mf.Cpu), goarch)}
		}
		for _, l := range mf.Loads {
			if s, ok := l.(*macho.Segment); ok && s.Offset+s.Filesz > uint64(size) {
				return formatResult{reason: fmt.Sprintf("truncated: segment %s ends at byte %d, the file is %d bytes", s.Name, s.Offset+s.Filesz, size)}
			}
		}
	}
	if mf.Type != macho.TypeDylib && mf.Type != macho.TypeBundle {
		return formatResult{reason: fmt.Sprintf("not a dynamic library (Mach-O type %v)", mf.Type)}
	}
	libs, err := mf.ImportedLibraries()
	if err != nil {
		return formatResult{reason: "corrupt Mach-O load commands", detail: err.Error()}
	}
	loaderPath := filepath.Dir(path)
	var rpaths []string
	for _, l := range mf.Loads {
		if r, ok := l.(*macho.Rpath); ok {
			rpaths = append(rpaths, strings.ReplaceAll(r.Path, "@loader_path", loaderPath))
		}
	}
	var deps []dep
	for _, n := range libs {
		deps = append(deps, dep{name: n, found: findMachOLib(n, loaderPath, rpaths)})
	}
	return formatResult{deps: deps}
}

// findMachOLib resolves an install name. System libraries live in the dyld
// shared cache, not on disk, and are taken as present.
func findMachOLib(name, loaderPath string, rpaths []string) string {
	switch {
	case strings.HasPrefix(name, "/usr/lib/"), strings.HasPrefix(name, "/System/"):
		return name
	case strings.HasPrefix(name, "@loader_path/"):
		p := filepath.Join(loaderPath, strings.TrimPrefix(name, "@loader_path/"))
		if fileExists(p) {
			return p
		}
	case strings.HasPrefix(name, "@rpath/"):
		for _, r := range rpaths {
			if p := filepath.Join(r, strings.TrimPrefix(name, "@rpath/")); fileExists(p) {
				return p
			}
		}
	case strings.HasPrefix(name, "@"):
		return name // @executable_path: cannot tell here; dlopen decides
	default:
		if fileExists(name) {
			return name
		}
	}
	return ""
}
