# SPDX-License-Identifier: Apache-2.0
"""llama_summary.py LOG LABEL: the summary of one build/llama run (its JSON
lines in LOG), for the GPU scripts (gpu_skinny.sh, gpu_gemv.sh): a line per
summary row, "<preset> <LABEL> <mode> batch <b>: <tok/s> tok/s, host <us>
us/step" (with host_parts's split of the host time), then how many steps'
graph tokens equal eager's. decode_twin.py's report prints host_parts too."""
import json
import sys


def host_parts(r):
    """" (launch <us>, plan <us>[, stage <us>[ (upload <us>)]])" from a
    summary's host_*_us_per_step fields ("" without launch and plan)."""
    if "host_launch_us_per_step" not in r or "host_plan_us_per_step" not in r:
        return ""
    stage = ""
    if "host_stage_us_per_step" in r:
        stage = ", stage %.1f" % r["host_stage_us_per_step"]
        if "host_upload_us_per_step" in r:
            stage += " (upload %.1f)" % r["host_upload_us_per_step"]
    return " (launch %.1f, plan %.1f%s)" % (r["host_launch_us_per_step"], r["host_plan_us_per_step"], stage)


def main(path, label):
    steps = {}
    for line in open(path):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r["kind"] == "summary":
            print("%s %s %s batch %d: %.1f tok/s, host %.1f us/step%s"
                  % (r["preset"], label, r["mode"], r["batch"], r["tokens_per_s"], r["host_us_per_step"],
                     host_parts(r)))
        elif r["kind"] == "step":
            steps.setdefault((r["batch"], r["step"]), {})[r["mode"]] = r["tokens"]
    same = sum(1 for v in steps.values() if v.get("eager") == v.get("graph"))
    print("  graph tokens identical to eager on %d of %d steps" % (same, len(steps)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: llama_summary.py LOG LABEL")
    main(sys.argv[1], sys.argv[2])
