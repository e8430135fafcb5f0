"""The Pod Security Standards level a pod template meets (privileged, baseline or
restricted), by the controls of kubernetes.io/docs/concepts/security/pod-security-standards
(the "latest" policy version: host namespaces, privileged, capabilities, hostPath
volumes, host ports, /proc mount, seccomp, sysctls; restricted adds volume types,
privilege escalation, non-root, seccomp RuntimeDefault/Localhost and capabilities
dropped). Pod Security Admission enforces these per namespace from Kubernetes 1.23 on;
the tiers cannot run it (1.20), so the chart's pods are checked here statically.
"""

from __future__ import annotations

from typing import Any

BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *spec.get("initContainers", []),
        *spec.get("containers", []),
        *spec.get("ephemeralContainers", []),
    ]


def baseline_violations(spec: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the baseline level ([] = it meets baseline)."""
    out = [f"{k}: true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    pod_sc = spec.get("securityContext") or {}
    out += [
        f"sysctl {s['name']}" for s in pod_sc.get("sysctls", []) if s["name"] not in SAFE_SYSCTLS
    ]
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccompProfile Unconfined")
    out += [f"hostPath volume {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        added = set((sc.get("capabilities") or {}).get("add", [])) - BASELINE_CAPS
        out += [f"{name}: adds {cap}" for cap in sorted(added)]
        out += [f"{name}: hostPort" for p in c.get("ports", []) if p.get("hostPort")]
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{name}: procMount")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{name}: seccompProfile Unconfined")
    return out


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the restricted level ([] = it meets restricted)."""
    out = baseline_violations(spec)
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    pod_sc = spec.get("securityContext") or {}
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_sc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation not false")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: capabilities not dropped")
        out += [f"{name}: adds {a}" for a in caps.get("add", []) if a != "NET_BIND_SERVICE"]
    return out


def level(spec: dict[str, Any]) -> str:
    """The strictest Pod Security Standards level ``spec`` meets."""
    if not baseline_violations(spec):
        return "restricted" if not restricted_violations(spec) else "baseline"
    return "privileged"
