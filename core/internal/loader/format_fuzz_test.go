// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"bytes"
	"debug/elf"
	"debug/macho"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets of the loader's readers of files it does not trust: a
// plugin file's headers (before anything is loaded), /etc/ld.so.cache and
// a probe cache entry. Bad bytes are a reason, never a crash, and what is
// accepted is what the bytes say. `go test` runs the seeds;
// scripts/fuzz_go.sh fuzzes them.

// elfSO is a minimal ELF64 little-endian shared library for machine:
// one PT_LOAD of the whole file, a PT_DYNAMIC, and sections .dynstr,
// .dynamic (DT_NEEDED for each of needed, DT_RUNPATH runpath) and
// .shstrtab.
func elfSO(machine elf.Machine, needed []string, runpath string) []byte {
	le := binary.LittleEndian
	dynstr := []byte{0}
	str := func(s string) uint64 {
		off := len(dynstr)
		dynstr = append(append(dynstr, s...), 0)
		return uint64(off)
	}
	var dyn []elf.Dyn64
	for _, n := range needed {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NEEDED), Val: str(n)})
	}
	if runpath != "" {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_RUNPATH), Val: str(runpath)})
	}
	dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NULL)})
	shstr := []byte("\x00.dynstr\x00.dynamic\x00.shstrtab\x00")
	align := func(n int) int { return (n + 7) &^ 7 }
	const ehsize, phsize, shsize = 64, 56, 64
	offDynstr := ehsize + 2*phsize
	offDyn := align(offDynstr + len(dynstr))
	offShstr := offDyn + 16*len(dyn)
	offSh := align(offShstr + len(shstr))
	size := offSh + 4*shsize

	var b bytes.Buffer
	w := func(v any) {
		if err := binary.Write(&b, le, v); err != nil {
			panic(err)
		}
	}
	pad := func(to int) { b.Write(make([]byte, to-b.Len())) }
	hdr := elf.Header64{Type: uint16(elf.ET_DYN), Machine: uint16(machine), Version: 1, Phoff: ehsize, Shoff: uint64(offSh),
		Ehsize: ehsize, Phentsize: phsize, Phnum: 2, Shentsize: shsize, Shnum: 4, Shstrndx: 3}
	copy(hdr.Ident[:], "\x7fELF\x02\x01\x01")
	w(hdr)
	w(elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Filesz: uint64(size), Memsz: uint64(size), Align: 0x1000})
	w(elf.Prog64{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R), Off: uint64(offDyn), Vaddr: uint64(offDyn),
		Paddr: uint64(offDyn), Filesz: uint64(16 * len(dyn)), Memsz: uint64(16 * len(dyn)), Align: 8})
	b.Write(dynstr)
	pad(offDyn)
	for _, d := range dyn {
		w(d)
	}
	b.Write(shstr)
	pad(offSh)
	w(elf.Section64{})
	w(elf.Section64{Name: 1, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: uint64(offDynstr), Off: uint64(offDynstr),
		Size: uint64(len(dynstr)), Addralign: 1})
	w(elf.Section64{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Flags: uint64(elf.SHF_ALLOC | elf.SHF_WRITE), Addr: uint64(offDyn),
		Off: uint64(offDyn), Size: uint64(16 * len(dyn)), Link: 1, Addralign: 8, Entsize: 16})
	w(elf.Section64{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: uint64(offShstr), Size: uint64(len(shstr)), Addralign: 1})
	return b.Bytes()
}

// machoDylib is a minimal 64-bit little-endian Mach-O of type typ for
// cpu: one __TEXT segment of the whole file, LC_LOAD_DYLIB for each of
// libs and an LC_RPATH when rpath is set.
func machoDylib(cpu macho.Cpu, typ macho.Type, libs []string, rpath string) []byte {
	le := binary.LittleEndian
	str8 := func(s string, fixed int) []byte { // s, NUL, padded to 8 after fixed bytes
		n := (fixed + len(s) + 1 + 7) &^ 7
		return append([]byte(s), make([]byte, n-fixed-len(s))...)
	}
	var cmds bytes.Buffer
	ncmds := 0
	w := func(v ...any) {
		for _, x := range v {
			if err := binary.Write(&cmds, le, x); err != nil {
				panic(err)
			}
		}
	}
	var seg [16]byte
	copy(seg[:], "__TEXT")
	segAt := cmds.Len()
	w(uint32(macho.LoadCmdSegment64), uint32(72), seg, uint64(0), uint64(0x1000), uint64(0), uint64(0), uint32(5), uint32(5),
		uint32(0), uint32(0))
	ncmds++
	for _, l := range libs {
		name := str8(l, 24)
		w(uint32(macho.LoadCmdDylib), uint32(24+len(name)), uint32(24), uint32(2), uint32(0x10000), uint32(0x10000))
		cmds.Write(name)
		ncmds++
	}
	if rpath != "" {
		p := str8(rpath, 12)
		w(uint32(macho.LoadCmdRpath), uint32(12+len(p)), uint32(12))
		cmds.Write(p)
		ncmds++
	}
	out := binary.LittleEndian.AppendUint32(nil, macho.Magic64)
	for _, v := range []uint32{uint32(cpu), 3, uint32(typ), uint32(ncmds), uint32(cmds.Len()), 0, 0} {
		out = le.AppendUint32(out, v)
	}
	out = append(out, cmds.Bytes()...)
	// the segment's file size: the whole file
	le.PutUint64(out[32+segAt+48:], uint64(len(out)))
	return out
}

// fatOf wraps a thin Mach-O in a universal binary of one slice.
func fatOf(cpu macho.Cpu, thin []byte) []byte {
	be := binary.BigEndian
	out := be.AppendUint32(nil, macho.MagicFat)
	out = be.AppendUint32(out, 1)
	const at = 64
	for _, v := range []uint32{uint32(cpu), 3, at, uint32(len(thin)), 6} {
		out = be.AppendUint32(out, v)
	}
	out = append(out, make([]byte, at-len(out))...)
	return append(out, thin...)
}

func formatSeeds() [][]byte {
	so := elfSO(elf.EM_X86_64, []string{"libc.so.6", "libgpurt_missing_dep.so.1"}, "$ORIGIN/../lib:${ORIGIN}")
	dylib := machoDylib(macho.CpuAmd64, macho.TypeDylib, []string{"/usr/lib/libSystem.B.dylib", "@rpath/libfoo.dylib"}, "@loader_path/../lib")
	seeds := [][]byte{
		so, elfSO(elf.EM_AARCH64, nil, ""), elfSO(elf.EM_X86_64, nil, ""), so[:63], so[:200], so[:len(so)-1],
		dylib, machoDylib(macho.CpuArm64, macho.TypeDylib, nil, ""), machoDylib(macho.CpuAmd64, macho.TypeExec, nil, ""),
		fatOf(macho.CpuAmd64, dylib), fatOf(macho.CpuArm64, dylib), dylib[:40],
		nil, []byte("\x7fELF"), []byte("#!/bin/sh\necho not a library\n"), []byte{0xce, 0xfa, 0xed, 0xfe, 0, 0, 0, 0},
	}
	// header fields: 32-bit, big-endian, an executable, headers past the
	// end, a PT_LOAD ending past the end (and wrapping around)
	for _, edit := range []func(b []byte){
		func(b []byte) { b[elf.EI_CLASS] = byte(elf.ELFCLASS32) },
		func(b []byte) { b[elf.EI_CLASS] = 7 },
		func(b []byte) { b[elf.EI_DATA] = byte(elf.ELFDATA2MSB) },
		func(b []byte) { binary.LittleEndian.PutUint16(b[16:], uint16(elf.ET_EXEC)) },
		func(b []byte) { binary.LittleEndian.PutUint64(b[32:], 1<<40) },
		func(b []byte) { binary.LittleEndian.PutUint64(b[40:], 1<<63) },
		func(b []byte) { binary.LittleEndian.PutUint16(b[60:], 0xffff) },
		func(b []byte) { binary.LittleEndian.PutUint64(b[64+32:], uint64(len(b))+1) },                         // PT_LOAD's filesz
		func(b []byte) { binary.LittleEndian.PutUint64(b[64+8:], 1<<63) },                                     // PT_LOAD's offset
		func(b []byte) { binary.LittleEndian.PutUint64(b[64+8:], 0xffffffffffffff00) },                        // offset + filesz wraps
		func(b []byte) { binary.LittleEndian.PutUint64(b[64+56+8:], 0xffffffffffffff00) },                     // PT_DYNAMIC's offset
		func(b []byte) { binary.LittleEndian.PutUint32(b[len(b)-2*64+40:], 9) },                               // .dynamic's link
		func(b []byte) { binary.LittleEndian.PutUint64(b[len(b)-2*64+32:], 0xfffffffffffff000) },              // .dynamic's size
		func(b []byte) { binary.LittleEndian.PutUint64(b[len(b)-2*64+24:], uint64(len(b))) },                  // .dynamic's offset
		func(b []byte) { binary.LittleEndian.PutUint64(b[len(b)-3*64+24:], uint64(len(b))-2) },                // .dynstr's offset
		func(b []byte) { copy(b[64+2*56:], bytes.Repeat([]byte{'x'}, 40)) },                                   // no NUL in .dynstr
		func(b []byte) { binary.LittleEndian.PutUint16(b[54:], 0); binary.LittleEndian.PutUint16(b[58:], 1) }, // entry sizes
	} {
		b := slices.Clone(so)
		edit(b)
		seeds = append(seeds, b)
	}
	for _, edit := range []func(b []byte){
		func(b []byte) { binary.LittleEndian.PutUint32(b[16:], 0xffffffff) },            // ncmds
		func(b []byte) { binary.LittleEndian.PutUint32(b[20:], 1<<30) },                 // sizeofcmds
		func(b []byte) { binary.LittleEndian.PutUint64(b[32+40:], 0xfffffffffffff000) }, // segment fileoff: offset + filesz wraps
		func(b []byte) { binary.LittleEndian.PutUint64(b[32+48:], uint64(len(b))+1) },   // segment filesize
		func(b []byte) { binary.LittleEndian.PutUint32(b[32+72+4:], 7) },                // a load command's size
	} {
		b := slices.Clone(dylib)
		edit(b)
		seeds = append(seeds, b)
	}
	fat := fatOf(macho.CpuAmd64, dylib)
	for _, edit := range []func(b []byte){
		func(b []byte) { binary.BigEndian.PutUint32(b[4:], 0xffffffff) },  // nfat_arch
		func(b []byte) { binary.BigEndian.PutUint32(b[16:], 0xfffffff0) }, // slice offset
		func(b []byte) { binary.BigEndian.PutUint32(b[20:], 0xfffffff0) }, // slice size
	} {
		b := slices.Clone(fat)
		edit(b)
		seeds = append(seeds, b)
	}
	return seeds
}

// within reports whether [off, off+n) lies inside size bytes, without
// wrapping.
func within(off, n, size uint64) bool {
	end, carry := bits.Add64(off, n, 0)
	return carry == 0 && end <= size
}

// FuzzCheckFormat: checkFormatOf on a file of arbitrary bytes, as the ELF
// of linux/amd64 (darwin false) or the Mach-O of darwin/amd64 (true),
// never panics and gives a reason for what it refuses; what it accepts is
// a 64-bit little-endian shared library (ELF ET_DYN, Mach-O dylib or
// bundle) for amd64 whose headers and loadable segments lie inside the
// file, and its dependencies are the libraries the file names.
func FuzzCheckFormat(f *testing.F) {
	for _, s := range formatSeeds() {
		f.Add(s, bytes.HasPrefix(s, []byte{0xcf, 0xfa}) || bytes.HasPrefix(s, []byte{0xca, 0xfe}) ||
			bytes.HasPrefix(s, []byte{0xce, 0xfa}))
	}
	// the lookups of dependencies stay in this folder (and the system's)
	dir := f.TempDir()
	path := filepath.Join(dir, "libgpurt_fuzz.so")
	f.Fuzz(func(t *testing.T, data []byte, darwin bool) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		goos := "linux"
		if darwin {
			goos = "darwin"
		}
		r := checkFormatOf(fh, path, int64(len(data)), goos, "amd64")
		if r.reason != "" {
			if r.deps != nil || r.origin {
				t.Fatalf("refused (%s) with dependencies %v", r.reason, r.deps)
			}
			return
		}
		var libs []string
		if darwin {
			libs = checkAcceptedMachO(t, data)
		} else {
			libs = checkAcceptedELF(t, data)
		}
		var names []string
		for _, d := range r.deps {
			names = append(names, d.name)
		}
		if !slices.Equal(names, libs) {
			t.Fatalf("dependencies %q, the file names %q", names, libs)
		}
	})
}

// checkAcceptedELF checks an ELF file checkFormatOf accepted and returns
// its DT_NEEDED libraries.
func checkAcceptedELF(t *testing.T, data []byte) []string {
	t.Helper()
	size := uint64(len(data))
	if len(data) < 64 || !bytes.HasPrefix(data, []byte("\x7fELF")) || elf.Class(data[elf.EI_CLASS]) != elf.ELFCLASS64 ||
		elf.Data(data[elf.EI_DATA]) != elf.ELFDATA2LSB {
		t.Fatalf("accepted a file that is not a 64-bit little-endian ELF file: % x", data[:min(len(data), 16)])
	}
	le := binary.LittleEndian
	if typ, mach := elf.Type(le.Uint16(data[16:])), elf.Machine(le.Uint16(data[18:])); typ != elf.ET_DYN || mach != elf.EM_X86_64 {
		t.Fatalf("accepted an ELF %v for %v", typ, mach)
	}
	ph := uint64(le.Uint16(data[54:])) * uint64(le.Uint16(data[56:]))
	sh := uint64(le.Uint16(data[58:])) * uint64(le.Uint16(data[60:]))
	if !within(le.Uint64(data[32:]), ph, size) || !within(le.Uint64(data[40:]), sh, size) {
		t.Fatalf("accepted an ELF file whose headers lie past its %d bytes", size)
	}
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("accepted an ELF file debug/elf cannot read: %v", err)
	}
	for i, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && !within(p.Off, p.Filesz, size) {
			t.Fatalf("accepted an ELF file whose segment %d, %d bytes at %d, is not inside its %d bytes", i, p.Filesz, p.Off, size)
		}
	}
	libs, err := ef.ImportedLibraries()
	if err != nil {
		t.Fatalf("accepted an ELF file whose dynamic section is unreadable: %v", err)
	}
	return libs
}

// checkAcceptedMachO checks a Mach-O file checkFormatOf accepted and
// returns its libraries.
func checkAcceptedMachO(t *testing.T, data []byte) []string {
	t.Helper()
	size := uint64(len(data))
	var mf *macho.File
	if ff, err := macho.NewFatFile(bytes.NewReader(data)); err == nil {
		for i := range ff.Arches {
			if a := &ff.Arches[i]; a.Cpu == macho.CpuAmd64 {
				if !within(uint64(a.Offset), uint64(a.Size), size) {
					t.Fatalf("accepted a universal binary whose amd64 slice, %d bytes at %d, is not inside its %d bytes", a.Size, a.Offset, size)
				}
				mf = a.File
				break
			}
		}
		if mf == nil {
			t.Fatalf("accepted a universal binary without amd64")
		}
	} else {
		if mf, err = macho.NewFile(bytes.NewReader(data)); err != nil {
			t.Fatalf("accepted a file debug/macho cannot read: %v", err)
		}
		if mf.Magic != macho.Magic64 || mf.Cpu != macho.CpuAmd64 {
			t.Fatalf("accepted a Mach-O file of magic %#x for %v", mf.Magic, mf.Cpu)
		}
		for _, l := range mf.Loads {
			if s, ok := l.(*macho.Segment); ok && !within(s.Offset, s.Filesz, size) {
				t.Fatalf("accepted a Mach-O file whose segment %s, %d bytes at %d, is not inside its %d bytes", s.Name, s.Filesz, s.Offset, size)
			}
		}
	}
	if mf.Type != macho.TypeDylib && mf.Type != macho.TypeBundle {
		t.Fatalf("accepted a Mach-O file of type %v", mf.Type)
	}
	libs, err := mf.ImportedLibraries()
	if err != nil {
		t.Fatalf("accepted a Mach-O file whose load commands are unreadable: %v", err)
	}
	return libs
}

// ldCacheFile is /etc/ld.so.cache in glibc's "1.1" format with entries
// (flags, name, path), after the old "1.7.0" format's header (with old
// entries) when old is set.
func ldCacheFile(old bool, entries ...struct {
	flags      int32
	name, path string
}) []byte {
	le := binary.LittleEndian
	var pre []byte
	if old {
		pre = append([]byte("ld.so-1.7.0\x00"), le.AppendUint32(nil, 2)...)
		pre = append(pre, make([]byte, 2*12)...)
		pre = append(pre, make([]byte, (len(pre)+7)&^7-len(pre))...)
	}
	strAt := 48 + 24*len(entries) // string offsets are from the new header's start
	var strs []byte
	b := append([]byte("glibc-ld.so.cache1.1"), le.AppendUint32(nil, uint32(len(entries)))...)
	b = append(b, make([]byte, 48-len(b))...)
	for _, e := range entries {
		k := strAt + len(strs)
		strs = append(append(strs, e.name...), 0)
		v := strAt + len(strs)
		strs = append(append(strs, e.path...), 0)
		b = le.AppendUint32(b, uint32(e.flags))
		b = le.AppendUint32(b, uint32(k))
		b = le.AppendUint32(b, uint32(v))
		b = append(b, make([]byte, 12)...)
	}
	return append(pre, append(b, strs...)...)
}

// FuzzParseLDCache: parseLDCache of arbitrary bytes never panics; every
// name -> path it returns is an entry of the file for amd64 (the first
// of its name), both strings inside the file and without NUL.
func FuzzParseLDCache(f *testing.F) {
	type entry = struct {
		flags      int32
		name, path string
	}
	good := ldCacheFile(false, entry{0x0303, "libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"},
		entry{0x0a03, "libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"}, entry{0x0303, "libc.so.6", "/lib64/libc.so.6"},
		entry{0x0303, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}, entry{0x0303, "", "/empty/name"})
	seeds := [][]byte{good, ldCacheFile(true, entry{0x0303, "libm.so.6", "/lib/libm.so.6"}), nil, []byte("garbage"),
		[]byte("ld.so-1.7.0"), good[:47], good[:48+24+3], good[:len(good)-1]}
	for _, edit := range []func(b []byte){
		func(b []byte) { binary.LittleEndian.PutUint32(b[20:], 0xffffffff) },   // nlibs
		func(b []byte) { binary.LittleEndian.PutUint32(b[48+4:], 0xffffffff) }, // a name's offset
		func(b []byte) { binary.LittleEndian.PutUint32(b[48+8:], 0x80000000) }, // a path's offset
	} {
		b := slices.Clone(good)
		edit(b)
		seeds = append(seeds, b)
	}
	old := ldCacheFile(true)
	binary.LittleEndian.PutUint32(old[12:], 0xffffffff) // old entries past the end
	seeds = append(seeds, old)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := parseLDCache(b, "amd64")
		if len(got) == 0 {
			return
		}
		// the new format's header: at 0, or after the old one
		base := 0
		if bytes.HasPrefix(b, []byte("ld.so-1.7.0")) && len(b) >= 16 {
			base = (16 + 12*int(binary.LittleEndian.Uint32(b[12:])) + 7) &^ 7
		}
		if base+48 > len(b) || !bytes.HasPrefix(b[base:], []byte("glibc-ld.so.cache1.1")) {
			t.Fatalf("%d entries from a file without the 1.1 header", len(got))
		}
		cstr := func(off uint32) (string, bool) {
			o := uint64(base) + uint64(off)
			if o >= uint64(len(b)) {
				return "", false
			}
			i := bytes.IndexByte(b[o:], 0)
			if i < 0 {
				return "", false
			}
			return string(b[o : o+uint64(i)]), true
		}
		first := map[string]string{}
		n := int(binary.LittleEndian.Uint32(b[base+20:]))
		for i := 0; i < n && base+48+24*(i+1) <= len(b); i++ {
			e := b[base+48+24*i:]
			if binary.LittleEndian.Uint32(e)&0xff00 != 0x0300 {
				continue
			}
			k, ok1 := cstr(binary.LittleEndian.Uint32(e[4:]))
			v, ok2 := cstr(binary.LittleEndian.Uint32(e[8:]))
			if _, dup := first[k]; ok1 && ok2 && k != "" && v != "" && !dup {
				first[k] = v
			}
		}
		if !reflect.DeepEqual(got, first) {
			t.Fatalf("parseLDCache = %q, the file's amd64 entries %q", got, first)
		}
		for k, v := range got {
			if k == "" || v == "" || strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("entry %q -> %q", k, v)
			}
		}
	})
}

// FuzzDecodeCacheEntry: a probe cache entry of arbitrary bytes. What
// decodeCacheEntry accepts is a report of this version for the plugin
// asked about, in a final state, with at most probeCapacity devices, and
// reads back the same once written again; a refusal says why and gives
// nothing.
func FuzzDecodeCacheEntry(f *testing.F) {
	const path = "/opt/gpurt/lib/libgpurt_mock.so"
	dev := Device{Index: 0, Name: "mock", Vendor: "gpurt", Arch: "cpu", MemoryTotal: 1 << 30, MemoryFree: 1 << 29, Flags: 3}
	for _, c := range []Candidate{
		{Path: path, Backend: "mock", Version: "1.0", ABI: "1.10", Priority: 100, Score: 5, State: StateAvailable, Devices: []Device{dev, dev}},
		{Path: path, State: StateSkipped, Reason: "no device"},
		{Path: path, State: StateFailed, Reason: "probe crashed", Detail: "SIGSEGV"},
		{Path: path, State: StateSelected},
		{Path: "/elsewhere/libgpurt_mock.so", State: StateAvailable},
		{Path: path, State: StateAvailable, Devices: make([]Device, probeCapacity+1)},
	} {
		b, err := json.Marshal(childReport{Version: reportVersion, Candidate: c})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{``, `null`, `{}`, `[]`, `{"gpurt_probe_report":2,"candidate":{"path":"` + path + `","state":"available"}}`,
		`{"gpurt_probe_report":1,"candidate":{"path":"` + path + `","state":"available","devices":null}}`,
		`{"gpurt_probe_report":1,"candidate":{"path":"` + path + `","state":"failed","priority":4294967296}}`,
		`{"gpurt_probe_report":1,"candidate":{"path":"` + path + `","state":"available","devices":[{"memory_total":-1}]}}`,
		`{"gpurt_probe_report":1,"candidate":{"path":"` + path + `","state":"available"}} trailing`,
		`{"gpurt_probe_report":1.0,"candidate":{"path":"` + path + `","state":"available","reason":"\ud800"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, why := decodeCacheEntry(b, path)
		if why != "" {
			if !reflect.DeepEqual(c, Candidate{}) {
				t.Fatalf("refused (%s) with a candidate %+v", why, c)
			}
			return
		}
		switch c.State {
		case StateAvailable, StateSkipped, StateFailed:
		default:
			t.Fatalf("accepted a candidate in state %q", c.State)
		}
		if c.Path != path || len(c.Devices) > probeCapacity {
			t.Fatalf("accepted a candidate for %q with %d devices", c.Path, len(c.Devices))
		}
		again, err := json.Marshal(childReport{Version: reportVersion, Candidate: c})
		if err != nil {
			t.Fatal(err)
		}
		if c2, why := decodeCacheEntry(again, path); why != "" || !reflect.DeepEqual(c2, c) {
			t.Fatalf("written again, %s reads back as %+v (%s), not %+v", again, c2, why, c)
		}
	})
}
