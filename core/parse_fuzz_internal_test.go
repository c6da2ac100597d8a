// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"math"
	"math/big"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/internal/bytesize"
)

// The fuzz targets of core's parsers of strings from the environment and
// the Config: bad input is an error naming the variable or field and the
// value, never a crash, and what is accepted is in the documented range.
// `go test` runs the seeds; scripts/fuzz_go.sh fuzzes them.

// FuzzResolvePoolBudget: Config.PoolBudget (v) and GPURT_POOL_BUDGET
// (env). A budget is a fraction in (0, 1] or a byte count above 1, the
// value given exactly (a count from the variable as bytesize reads it),
// and names where it came from; an error is an ErrInvalidArgument naming
// the field or the variable and the value.
func FuzzResolvePoolBudget(f *testing.F) {
	for _, v := range []float64{0, 0.5, 1, 1e-300, 1.5, 2, 2.5, 1 << 30, 1 << 62, 1<<62 + 1<<11, 1e300, -1, math.Inf(1), math.NaN(),
		math.SmallestNonzeroFloat64, math.Nextafter(1, 2)} {
		f.Add(v, "")
	}
	for _, s := range []string{"0.9", "1", "1.0", "2", "64K", "16 GiB", "1.5G", " 0.25 ", "0", "-1", "-1G", "1.5", "abc", "NaN", "Inf",
		"1e-300", "0x1p-1", "1e3", "9999999999T", "99999999999999999999", "1B", "0.0000001"} {
		f.Add(0.0, s)
	}
	f.Add(0.5, "garbage") // the field wins
	f.Fuzz(func(t *testing.T, v float64, env string) {
		getenv := func(k string) string {
			if k == "GPURT_POOL_BUDGET" {
				return env
			}
			return ""
		}
		pb, err := resolvePoolBudget("open", v, getenv)
		s := strings.TrimSpace(env)
		name, value := "Config.PoolBudget", strconv.FormatFloat(v, 'g', -1, 64)
		if v == 0 {
			name, value = "GPURT_POOL_BUDGET", s
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), name+"="+strconv.Quote(value)) {
				t.Fatalf("v %g, env %q: error %q is not an invalid argument naming %s=%q", v, env, err, name, value)
			}
			return
		}
		switch {
		case v == 0 && s == "":
			if pb != (poolBudget{}) {
				t.Fatalf("nothing set: budget %+v", pb)
			}
			return
		case pb.fraction != 0:
			if !(pb.fraction > 0 && pb.fraction <= 1) || pb.bytes != 0 {
				t.Fatalf("v %g, env %q: budget %+v", v, env, pb)
			}
			want := v
			if v == 0 {
				want, _ = strconv.ParseFloat(s, 64)
			}
			if pb.fraction != want {
				t.Fatalf("v %g, env %q: fraction %g, want %g", v, env, pb.fraction, want)
			}
		default:
			if pb.bytes <= 1 {
				t.Fatalf("v %g, env %q: budget %+v, not a fraction nor a count above 1", v, env, pb)
			}
			if v != 0 && float64(pb.bytes) != v {
				t.Fatalf("v %g: a budget of %d bytes", v, pb.bytes)
			}
			if n, err := bytesize.Parse(s); v == 0 && (err != nil || uint64(n) != pb.bytes) {
				t.Fatalf("env %q: a budget of %d bytes, bytesize reads %d, %v", env, pb.bytes, n, err)
			}
		}
		if !strings.HasPrefix(pb.from, name) {
			t.Fatalf("v %g, env %q: budget %+v does not say it comes from %s", v, env, pb, name)
		}
		// a device's budget: the count, or the fraction of its memory
		// (none when it reports none), saying where it came from
		for _, total := range []uint64{0, 1, 80 << 30} {
			b, from := pb.of(total)
			ok := strings.Contains(from, pb.from)
			switch {
			case pb.fraction == 0:
				ok = ok && b == pb.bytes
			case total == 0:
				ok = b == math.MaxUint64 && strings.HasPrefix(from, "unbounded")
			default:
				ok = ok && b <= total && b == uint64(pb.fraction*float64(total))
			}
			if !ok {
				t.Fatalf("budget %+v of a device of %d bytes: %d (%s)", pb, total, b, from)
			}
		}
	})
}

// envNames are the variables resolveEnv reads, in FuzzResolveEnv's
// argument order.
var envNames = []string{"GPURT_LOG_LEVEL", "GPURT_PROBE_CACHE", "GPURT_OPCACHE_SIZE", "GPURT_STAGE_CHUNK", "GPURT_STAGE_SLOTS",
	"GPURT_COPY_WORKERS", "GPURT_POOL_BUDGET"}

// A whole number, and a sized one: digits (a sign allowed) and one K, M or
// G (any case).
var (
	wholeNumber = regexp.MustCompile(`^([+-]?[0-9]+)$`)
	sizedNumber = regexp.MustCompile(`^([+-]?[0-9]+)([kKmMgG]?)$`)
)

// refNum is a variable of resolveEnv's whole numbers read independently
// (a regular expression and big-number arithmetic, where resolveEnv cuts
// a suffix and multiplies ints); ok when the value lies in lo .. hi.
func refNum(v string, lo, hi int, sized bool) (int, bool) {
	re := wholeNumber
	if sized {
		re = sizedNumber
	}
	m := re.FindStringSubmatch(v)
	if m == nil {
		return 0, false
	}
	n, ok := new(big.Int).SetString(m[1], 10)
	if !ok {
		return 0, false
	}
	if len(m) > 2 && m[2] != "" {
		shift := map[byte]uint{'k': 10, 'm': 20, 'g': 30}[m[2][0]|0x20]
		n.Lsh(n, shift)
	}
	if n.Cmp(big.NewInt(int64(lo))) < 0 || n.Cmp(big.NewInt(int64(hi))) > 0 {
		return 0, false
	}
	return int(n.Int64()), true
}

// FuzzResolveEnv: resolveEnv with every GPURT_* variable it reads set to
// arbitrary strings (and an empty Config). Accepted settings lie in the
// documented ranges and are the variables' values; an error is an
// ErrInvalidArgument naming the first variable that is wrong and its
// value, and that variable is wrong.
func FuzzResolveEnv(f *testing.F) {
	f.Add("", "", "", "", "", "", "")
	f.Add("debug", "/tmp/probe", "64", "1M", "8", "3", "0.9")
	f.Add(" INFO ", "off", "1048576", "64k", "16", "256", "16G")
	f.Add("loud", "", "", "", "", "", "")
	f.Add("", "./cache", "", "", "", "", "")
	f.Add("", "/a\x00b", "", "", "", "", "")
	f.Add("", "", "0", "", "", "", "")
	f.Add("", "", "1048577", "", "", "", "")
	f.Add("", "", "+5", "-0", "02", "", "")
	f.Add("", "", "", "63K", "", "", "")
	f.Add("", "", "", "1G", "", "", "")
	f.Add("", "", "", "1025M", "", "", "")
	f.Add("", "", "", "99999999999999G", "", "", "")
	f.Add("", "", "", "65537", "", "", "")
	f.Add("", "", "", "K", "", "", "")
	f.Add("", "", "", "", "1", "", "")
	f.Add("", "", "", "", "17", "", "")
	f.Add("", "", "", "", "", "0", "")
	f.Add("", "", "", "", "", "257", "")
	f.Add("", "", "", "", "", "", "1.5")
	f.Add("", "", "", "", "", "", "-1G")
	f.Add("", "", "", "", "", "", "99999999999999999999")
	f.Add("off", "", "9223372036854775807", "9223372036854775807k", "4\x00", " 12 ", "1")
	f.Fuzz(func(t *testing.T, level, probeCache, opCache, chunk, slots, workers, budget string) {
		vals := []string{level, probeCache, opCache, chunk, slots, workers, budget}
		env := map[string]string{}
		for i, k := range envNames {
			env[k] = vals[i]
		}
		cfg := Config{Logger: hclog.NewNullLogger()}
		const procs = 8
		s, err := cfg.resolveEnv("open", func(k string) string { return env[k] }, procs)

		// what each variable should give, read independently; bad[i]:
		// variable i is set and wrong
		trim := func(i int) string { return strings.TrimSpace(vals[i]) }
		bad := make([]bool, len(vals))
		switch strings.ToLower(trim(0)) {
		case "", "trace", "debug", "info", "warn", "error", "off":
		default:
			bad[0] = true
		}
		if pc := trim(1); pc != "" && pc != "off" && (!filepath.IsAbs(pc) || strings.IndexByte(pc, 0) >= 0) {
			bad[1] = true
		}
		want := settings{opCacheSize: 1024, stage: stageSettings{Chunk: defaultStageChunk, BigAuto: true, Slots: defaultStageSlots,
			Workers: min(procs-1, maxCopyParts)}}
		for i, r := range []struct {
			lo, hi int
			sized  bool
			dst    *int
		}{{1, 1 << 20, false, &want.opCacheSize}, {64 << 10, 1 << 30, true, &want.stage.Chunk}, {2, maxStageSlots, false, &want.stage.Slots},
			{1, 256, false, &want.stage.Workers}} {
			v := trim(2 + i)
			if v == "" {
				continue
			}
			n, ok := refNum(v, r.lo, r.hi, r.sized)
			if !ok {
				bad[2+i] = true
				continue
			}
			*r.dst = n
			if r.sized {
				want.stage.Chunk, want.stage.BigAuto = (n+4095)&^4095, false
			}
		}
		_, perr := resolvePoolBudget("open", 0, func(k string) string { return env[k] })
		bad[6] = perr != nil // FuzzResolvePoolBudget checks it

		first := -1
		for i, b := range bad {
			if b {
				first = i
				break
			}
		}
		if err != nil {
			if first < 0 {
				t.Fatalf("env %q: refused: %v", vals, err)
			}
			name := envNames[first]
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), name+"="+strconv.Quote(trim(first))) &&
				!strings.Contains(err.Error(), name+"="+strconv.Quote(vals[first])) {
				t.Fatalf("env %q: error %q does not name %s=%q", vals, err, name, trim(first))
			}
			return
		}
		if first >= 0 {
			t.Fatalf("env %q: %s=%q accepted", vals, envNames[first], vals[first])
		}
		if s.opCacheSize != want.opCacheSize || s.stage != want.stage {
			t.Fatalf("env %q: op cache %d, staging %+v; want %d, %+v", vals, s.opCacheSize, s.stage, want.opCacheSize, want.stage)
		}
		if c := s.stage.Chunk; c < 64<<10 || c > 1<<30 || c%4096 != 0 || s.stage.Slots < 2 || s.stage.Slots > maxStageSlots ||
			s.stage.Workers < 1 || s.stage.Workers > 256 {
			t.Fatalf("env %q: staging %+v out of range", vals, s.stage)
		}
	})
}

// pciForm is a PCI bus id as FindDevice documents it, read independently
// of normPCI: [domain:]bus:device.function, hex.
var pciForm = regexp.MustCompile(`^(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)$`)

// FuzzNormPCI: the PCI bus id parser of FindDevice. It accepts exactly a
// hex domain (32 bits; 0 when left out), bus (8 bits), device (5 bits)
// and function (3 bits); its canonical form is itself canonical and the
// same in either case.
func FuzzNormPCI(f *testing.F) {
	for _, s := range []string{"0000:3b:00.0", "3b:00.0", "00000000:3B:00.0", "0:0:0.0", "ffffffff:ff:1f.7", "100000000:00:00.0",
		"0000:100:00.0", "0000:00:20.0", "0000:00:00.8", "0000:3b:00", "3b.00.0", "::.", "0000::00.0", ":3b:00.0", "0x00:3b:00.0",
		"+0:3b:00.0", "0_0:3b:00.0", "0000:3b:00.0.1", "a:b:c:d.e", "gpu-1234", "3", "00000000000000000000000001:00:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := normPCI(s)
		want := ""
		if m := pciForm.FindStringSubmatch(s); m != nil {
			var v [4]uint64
			fits := true
			for i, p := range []struct {
				s   string
				max uint64
			}{{m[1], math.MaxUint32}, {m[2], 0xff}, {m[3], 0x1f}, {m[4], 7}} {
				if p.s == "" { // no domain
					continue
				}
				n, err := strconv.ParseUint(p.s, 16, 64)
				if err != nil || n > p.max {
					fits = false
				}
				v[i] = n
			}
			if fits {
				want = strconv.FormatUint(v[0], 16) + ":" + strconv.FormatUint(v[1], 16) + ":" + strconv.FormatUint(v[2], 16) + "." +
					strconv.FormatUint(v[3], 16)
			}
		}
		if ok != (want != "") || got != want {
			t.Fatalf("normPCI(%q) = %q, %v; want %q", s, got, ok, want)
		}
		if ok {
			if again, ok2 := normPCI(got); !ok2 || again != got {
				t.Fatalf("normPCI(%q) = %q, but normPCI(%q) = %q, %v", s, got, got, again, ok2)
			}
			if up, ok2 := normPCI(strings.ToUpper(s)); !ok2 || up != got {
				t.Fatalf("normPCI(%q) = %q, upper case %q, %v", s, got, up, ok2)
			}
		}
	})
}
