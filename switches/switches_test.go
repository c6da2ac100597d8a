// SPDX-License-Identifier: Apache-2.0

package switches

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The switches are process-global and can never be reset, so every test
// that touches a cell runs its body in a child process of this test binary
// (selected by childEnv), with exactly the environment it names. Tests stay
// independent and the order they run in does not matter.
const childEnv = "GPURT_SWITCHES_CHILD"

// scenarios are the bodies run in child processes; each returns an error
// describing the first failed expectation.
var scenarios = map[string]func() error{
	// Port of the seed's an_absent_flag_does_not_seal_the_midchunk_cell.
	"absent_flag_does_not_seal_midchunk": func() error {
		for range 3 {
			SetSSMTailMidchunk(nil)
		}
		off, on := false, true
		SetSSMTailMidchunk(&off)
		if SSMTailMidchunkEnabled() {
			return fmt.Errorf("an absent flag must leave the cell open for the next writer")
		}
		SetSSMTailMidchunk(&on)
		if SSMTailMidchunkEnabled() {
			return fmt.Errorf("and a SET one is final")
		}
		return nil
	},
	"value": func() error { // prints the values for the table tests
		fmt.Printf("ckpt=%v hermetic=%v midchunk=%v\n", SSMTailCkptEnabled(), HermeticEnabled(), SSMTailMidchunkEnabled())
		return nil
	},
	"first_read_seals_midchunk": func() error {
		if !SSMTailMidchunkEnabled() {
			return fmt.Errorf("midchunk must default to on")
		}
		off := false
		SetSSMTailMidchunk(&off)
		if !SSMTailMidchunkEnabled() {
			return fmt.Errorf("a value published after the first read must be ignored")
		}
		return nil
	},
	"set_hermetic_before_read": func() error {
		SetHermetic(true)
		if !HermeticEnabled() {
			return fmt.Errorf("SetHermetic(true) before the first read must turn hermetic on")
		}
		return nil
	},
	"set_hermetic_false_leaves_env_deciding": func() error {
		SetHermetic(false)
		if !HermeticEnabled() { // run with METRALE_HERMETIC=1
			return fmt.Errorf("SetHermetic(false) must publish nothing; the environment decides")
		}
		return nil
	},
	"hermetic_read_caches": func() error {
		if HermeticEnabled() {
			return fmt.Errorf("hermetic must default to off")
		}
		SetHermetic(true)
		if HermeticEnabled() {
			return fmt.Errorf("HermeticEnabled caches its first answer")
		}
		return nil
	},
	"env_read_once": func() error {
		first := SSMTailCkptEnabled()
		os.Setenv(EnvSSMTailCkpt, "0")
		if SSMTailCkptEnabled() != first {
			return fmt.Errorf("the environment is read once")
		}
		return nil
	},
	"concurrent_first_reads_agree": func() error {
		var wg sync.WaitGroup
		results := make([]bool, 64)
		off := false
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					SetSSMTailMidchunk(&off)
				}
				results[i] = SSMTailMidchunkEnabled()
			}()
		}
		wg.Wait()
		for _, r := range results {
			if r != results[0] {
				return fmt.Errorf("goroutines saw different sealed values")
			}
		}
		return nil
	},
}

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		body, ok := scenarios[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown scenario %q\n", name)
			os.Exit(3)
		}
		if err := body(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child runs scenario name in a fresh process with only env set among the
// METRALE_* variables, and returns its standard output.
func child(t *testing.T, name string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "METRALE_") && !strings.HasPrefix(kv, childEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"="+name)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "scenario %s: %s", name, stderr.String())
	return strings.TrimSpace(string(out))
}

// Port of the seed's the_tail_boundary_is_the_last_block_strictly_below_the_prompt.
func TestTailBoundaryIsTheLastBlockStrictlyBelowThePrompt(t *testing.T) {
	for _, tc := range []struct {
		total, block, want int
		ok                 bool
		why                string
	}{
		{0, 16, 0, false, "no boundary gives none, not 0"},
		{16, 16, 0, false, "not the prompt's own end"},
		{17, 16, 16, true, ""},
		{32, 16, 16, true, "strictly below"},
		{33, 16, 32, true, ""},
		{100, 0, 0, false, "no division by zero"},
		{1, 1, 0, false, "total <= block"},
		{2, 1, 1, true, ""},
		{100, -4, 0, false, "negative block size"},
	} {
		t.Run(fmt.Sprintf("%d_%d", tc.total, tc.block), func(t *testing.T) {
			got, ok := SSMTailBoundary(tc.total, tc.block)
			assert.Equal(t, tc.ok, ok, tc.why)
			assert.Equal(t, tc.want, got, tc.why)
		})
	}
}

func TestScenariosInChildProcesses(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		env      []string
	}{
		{"absent_flag_does_not_seal_midchunk", nil},
		{"first_read_seals_midchunk", nil},
		{"set_hermetic_before_read", nil},
		{"set_hermetic_false_leaves_env_deciding", []string{EnvHermetic + "=1"}},
		{"hermetic_read_caches", nil},
		{"env_read_once", []string{EnvSSMTailCkpt + "=1"}},
		{"concurrent_first_reads_agree", nil},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			child(t, tc.scenario, tc.env...)
		})
	}
}

func TestEnvironmentValues(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "ckpt=false hermetic=false midchunk=true"},
		{[]string{EnvSSMTailCkpt + "=1"}, "ckpt=true hermetic=false midchunk=true"},
		{[]string{EnvSSMTailCkpt + "=true"}, "ckpt=false hermetic=false midchunk=true"},
		{[]string{EnvSSMTailCkpt + "= 1"}, "ckpt=false hermetic=false midchunk=true"},
		{[]string{EnvHermetic + "=1"}, "ckpt=false hermetic=true midchunk=true"},
		{[]string{EnvHermetic + "=0"}, "ckpt=false hermetic=false midchunk=true"},
		{[]string{EnvSSMTailMidchunk + "=0"}, "ckpt=false hermetic=false midchunk=false"},
		{[]string{EnvSSMTailMidchunk + "=false"}, "ckpt=false hermetic=false midchunk=true"},
		{[]string{EnvSSMTailMidchunk + "="}, "ckpt=false hermetic=false midchunk=true"},
	} {
		t.Run(strings.Join(tc.env, ","), func(t *testing.T) {
			assert.Equal(t, tc.want, child(t, "value", tc.env...))
		})
	}
}
