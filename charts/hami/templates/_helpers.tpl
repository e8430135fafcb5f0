{{/* Names ------------------------------------------------------------------------ */}}

{{- define "hami.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- /* Whether kube-scheduler elects a leader on its Lease (named schedulerName): asked,
or forced by more than one replica. "true" or "false". */ -}}
{{- define "hami.schedulerElects" -}}
{{- if or .Values.scheduler.leaderElect (gt (int .Values.scheduler.replicas) 1) }}true{{ else }}false{{ end -}}
{{- end -}}
{{- define "hami.scheduler" -}}{{ include "hami.fullname" . | trunc 53 }}-scheduler{{- end -}}
{{- define "hami.webhook" -}}{{ include "hami.fullname" . | trunc 55 }}-webhook{{- end -}}
{{- define "hami.devicePlugin" -}}{{ include "hami.fullname" . | trunc 48 }}-device-plugin{{- end -}}
{{- define "hami.config" -}}{{ include "hami.fullname" . | trunc 56 }}-config{{- end -}}
{{- /* The scheduler's allocation-signing key (made by it at start) and the public keys
the device plugins mount (docs/PROTOCOL.md §4a). */ -}}
{{- define "hami.allocationKey" -}}{{ include "hami.fullname" . | trunc 48 }}-allocation-key{{- end -}}
{{- define "hami.allocationPublicKeys" -}}{{ include "hami.fullname" . | trunc 47 }}-allocation-keys{{- end -}}
{{- define "hami.webhookSecret" -}}
{{- if eq .Values.webhook.tls.mode "manual" -}}
{{- .Values.webhook.tls.manual.secretName -}}
{{- else -}}
{{- include "hami.webhook" . }}-tls
{{- end -}}
{{- end -}}

{{/* Labels ----------------------------------------------------------------------- */}}

{{- define "hami.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
app.kubernetes.io/name: {{ include "hami.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* selectorLabels: (dict "root" $ "component" "scheduler") */}}
{{- define "hami.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hami.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hami.annotations" -}}
{{- with .Values.global.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Images ----------------------------------------------------------------------- */}}

{{/* hami.image: (dict "root" $ "image" .Values.webhook.image): the component's image,
     falling back to .Values.image, then global.imageRegistry / global.imageTag. */}}
{{- define "hami.image" -}}
{{- $root := .root -}}
{{- $registry := default $root.Values.image.registry .image.registry | default $root.Values.global.imageRegistry -}}
{{- $repository := default $root.Values.image.repository .image.repository -}}
{{- $tag := default $root.Values.image.tag .image.tag | default $root.Values.global.imageTag | default $root.Chart.AppVersion -}}
{{- if $registry -}}{{ $registry }}/{{- end -}}{{ $repository }}:{{ $tag }}
{{- end -}}

{{- define "hami.pullPolicy" -}}
{{- default .root.Values.image.pullPolicy .image.pullPolicy -}}
{{- end -}}

{{/* The cluster's version without a vendor suffix, e.g. v1.20.2. */}}
{{- define "hami.kubeVersion" -}}
{{- regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version -}}
{{- end -}}

{{- define "hami.kubeMinor" -}}
{{- regexReplaceAll "[^0-9]" .Capabilities.KubeVersion.Minor "" | int -}}
{{- end -}}

{{- define "hami.kubeSchedulerImage" -}}
{{- $img := .Values.scheduler.kubeScheduler.image -}}
{{- $tag := default (include "hami.kubeVersion" .) $img.tag -}}
{{- $registry := default .Values.global.imageRegistry $img.registry -}}
{{- if $registry -}}{{ $registry }}/{{- end -}}{{ $img.repository }}:{{ $tag }}
{{- end -}}

{{/* kube-scheduler's configuration API for this cluster: v1beta1 on 1.19-1.21, v1beta2 on
     1.22, v1beta3 on 1.23-1.24, v1 from 1.25 on (each removed a few minors later). */}}
{{- define "hami.kubeSchedulerConfigAPI" -}}
{{- $minor := include "hami.kubeMinor" . | int -}}
{{- if ge $minor 25 -}}kubescheduler.config.k8s.io/v1
{{- else if ge $minor 23 -}}kubescheduler.config.k8s.io/v1beta3
{{- else if eq $minor 22 -}}kubescheduler.config.k8s.io/v1beta2
{{- else -}}kubescheduler.config.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/* Every managed resource of every enabled backend. */}}
{{- define "hami.managedResources" -}}
{{- range $name, $dev := .Values.devices }}
{{- if $dev.enabled }}
{{- range $dev.customresources }}
- name: {{ . | quote }}
  ignoredByScheduler: true
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Environment every container gets: the explicit API server, the namespace. */}}
{{- define "hami.env" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- with .Values.global.kubeAPIServer }}
{{- if .host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .port | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "hami.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Seconds of a Go duration like 5m, 300s, 1h (HAMi's nodeLockExpire). */}}
{{- define "hami.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "h" $d -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else -}}{{ trimSuffix "s" $d | int }}
{{- end -}}
{{- end -}}

{{/* hami.nodeSide: (dict "root" $ "name" "biren" "dev" .Values.devices.biren): what runs
     the backend's nodes, "hami" (this chart's device-plugin DaemonSet) or "vendor" (the
     vendor's own device plugin, which the user installs). devices.<name>.devicePlugin
     when set, else derived from backends.yaml (generated from the backends by
     scripts/chart-backends.py): hami's where it can serve the vendor (hami_discover) and
     the backend names no vendor device plugin. */}}
{{- define "hami.nodeSide" -}}
{{- $all := .root.Files.Get "backends.yaml" | fromYaml -}}
{{- $facts := index $all .name | default dict -}}
{{- /* a backend the file does not know (built into your own image): hami's, as asked */ -}}
{{- $hami := or (not (hasKey $all .name)) (and $facts.hamiDevicePlugin (not $facts.vendorDevicePlugin)) -}}
{{- .dev.devicePlugin | default (ternary "hami" "vendor" $hami) -}}
{{- end -}}

{{/* Checks that the schema cannot express. */}}
{{- define "hami.validate" -}}
{{- if and .Values.rbac.admissionPolicies.enabled (lt (include "hami.kubeMinor" . | int) 30) -}}
{{- fail (printf "rbac.admissionPolicies.enabled needs Kubernetes 1.30 or later (ValidatingAdmissionPolicy v1, and service-account tokens that name their node); this cluster is %s" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $facts := .Files.Get "backends.yaml" | fromYaml -}}
{{- range $name, $dev := .Values.devices -}}
{{- if $dev.enabled -}}
{{- $fact := index $facts $name | default dict -}}
{{- if and (hasKey $facts $name) (eq (include "hami.nodeSide" (dict "root" $ "name" $name "dev" $dev)) "hami") (not $fact.hamiDevicePlugin) -}}
{{- fail (printf "devices.%s.devicePlugin: hami's device plugin cannot serve %s (it would exit 2 on every node); leave devicePlugin unset and install %s" $name $name $fact.vendorDevicePlugin) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if le (int .Values.scheduler.extender.httpTimeoutSeconds) (int .Values.scheduler.extender.bindLockWaitSeconds) -}}
{{- fail (printf "scheduler.extender.httpTimeoutSeconds (%v) must be greater than scheduler.extender.bindLockWaitSeconds (%v): kube-scheduler would cut off a bind that waits for a node lock" .Values.scheduler.extender.httpTimeoutSeconds .Values.scheduler.extender.bindLockWaitSeconds) -}}
{{- end -}}
{{- if and (eq .Values.webhook.tls.mode "manual") .Values.scheduler.admissionWebhook.enabled (or (not .Values.webhook.tls.manual.secretName) (not .Values.webhook.tls.manual.caBundle)) -}}
{{- fail "webhook.tls.mode manual needs webhook.tls.manual.secretName and webhook.tls.manual.caBundle" -}}
{{- end -}}
{{- end -}}

{{/* Security ---------------------------------------------------------------------- */}}

{{/* hami.metaAnnotations: (dict "root" $ "skips" (list "CKV_K8S_43=reason" ...) "extra" dict):
     an object's annotations: global.annotations, the extra ones, and one
     checkov.io/skipN per declared exception (the check's id and why the component needs
     what the check forbids; checkov reports it as skipped, with the reason). */}}
{{- define "hami.metaAnnotations" -}}
{{- $all := dict -}}
{{- range $k, $v := (.root.Values.global.annotations | default dict) }}{{ $_ := set $all $k $v }}{{ end -}}
{{- range $k, $v := (.extra | default dict) }}{{ $_ := set $all $k $v }}{{ end -}}
{{- range $i, $skip := (.skips | default list) }}{{ $_ := set $all (printf "checkov.io/skip%d" (add1 $i)) $skip }}{{ end -}}
{{- with $all }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The exceptions every hami image container shares with any chart that installs by tag. */}}
{{- define "hami.imageSkips" -}}
- "CKV_K8S_43=the image is named by tag, as helm users set it; pin it by digest with the image's tag value (e.g. tag: 0.1.0@sha256:...), which checkov then passes"
- "CKV_K8S_15=pullPolicy IfNotPresent (configurable) so nodes without registry access run preloaded images; a digest-pinned image passes this check"
{{- end -}}

{{/* Pod-level securityContext of the components that need no node access (scheduler,
     webhook): Pod Security Standards "restricted". 65532 is the conventional "nonroot"
     uid; the image's files are world-readable. */}}
{{- define "hami.restrictedPodSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "hami.restrictedContainerSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* The API credentials, mounted only into the containers that call the API server:
     pods set automountServiceAccountToken: false and mount this projected volume (what
     kubelet's automount makes: a bound token it renews, the cluster CA, the namespace)
     at the path in-cluster clients read. */}}
{{- define "hami.apiAccessVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end -}}

{{- define "hami.apiAccessMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end -}}

{{/* The scheduler Deployment's declared exceptions (checkov.io/skipN). */}}
{{- define "hami.schedulerSkips" -}}
{{ include "hami.imageSkips" . }}
{{- if .Values.scheduler.hostNetwork }}
- "CKV_K8S_19=scheduler.hostNetwork (off by default): for clusters without a pod network for control-plane components; the extender still listens on 127.0.0.1"
{{- end }}
- "CKV_K8S_114=profiling is off where kube-scheduler reads it, enableProfiling: false in its KubeSchedulerConfiguration; the --profiling flag is ignored when --config is given"
- "CKV_K8S_115=kube-scheduler serves /healthz on the pod's own address so kubelet can probe it (a pod network address, not the node's; the extender alone stays on 127.0.0.1); networkPolicy.enabled admits only the metrics port"
{{- if not .Values.networkPolicy.enabled }}
- "CKV2_K8S_6=NetworkPolicies are off (networkPolicy.enabled: false, for CNIs that enforce none); on, they admit only Prometheus to the metrics port"
{{- end }}
{{- end -}}

{{- define "hami.webhookSkips" -}}
{{ include "hami.imageSkips" . }}
{{- if .Values.webhook.hostNetwork }}
- "CKV_K8S_19=webhook.hostNetwork (off by default): on clusters where Service IPs do not route, the API server calls the webhook by URL on the node it runs on (examples/no-kube-proxy.yaml)"
{{- end }}
{{- if not .Values.networkPolicy.enabled }}
- "CKV2_K8S_6=NetworkPolicies are off (networkPolicy.enabled: false, for CNIs that enforce none); on, they admit only the API server's addresses to the webhook port"
{{- end }}
{{- end -}}

{{/* What each vendor's device plugin opens on the host, for the declared exceptions:
     its tool and device nodes (the backends' discovery code). */}}
{{- define "hami.vendorDeviceAccess" -}}
{{- $access := dict
  "nvidia" "NVML (injected by NVIDIA's container toolkit) on every /dev/nvidia* node, and for dynamic MIG nvidia-smi mig, which needs CAP_SYS_ADMIN on /dev/nvidia-caps"
  "amd" "rocm-smi on /dev/kfd and /dev/dri/*"
  "ascend" "npu-smi on /dev/davinci*, /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc"
  "cambricon" "cnmon on /dev/cambricon_dev*, /dev/cambricon_ctl and /dev/cambricon_ipcm*"
  "hygon" "hy-smi on /dev/kfd, /dev/mkfd and /dev/dri/*"
  "kunlun" "xpu-smi on /dev/xpu* and /dev/xpuctrl"
  "awsneuron" "neuron-ls on /dev/neuron*"
-}}
{{- get $access .name | default (printf "the %s vendor tool on its /dev nodes" .name) -}}
{{- end -}}

{{/* The device plugin DaemonSet's declared exceptions: (dict "root" $ "name" "nvidia"
     "hostPID" bool). */}}
{{- define "hami.devicePluginSkips" -}}
{{- $why := include "hami.vendorDeviceAccess" . -}}
{{ include "hami.imageSkips" .root }}
- "CKV_K8S_16=devicePlugin.securityContext privileged: the {{ .name }} device plugin runs {{ $why }}; device cgroup rules cannot name nodes that appear after start (hot-plug, MIG instances)"
- "CKV_K8S_20=privileged (CKV_K8S_16) implies privilege escalation"
- "CKV_K8S_37=privileged (CKV_K8S_16) holds every capability"
- "CKV_K8S_28=privileged (CKV_K8S_16) holds every capability, NET_RAW among them; the pod has no host network unless devicePlugin.hostNetwork"
- "CKV_K8S_23=root: it writes kubelet's device-plugin socket under {{ .root.Values.devicePlugin.pluginPath }} and libvgpu.so under {{ .root.Values.global.gpuHookPath }}/vgpu, both root-owned host directories"
- "CKV_K8S_40=it runs as uid 0, for the reason CKV_K8S_23 gives"
- "CKV_K8S_22=the vendor tool writes its logs and locks on the root filesystem"
- "CKV_K8S_29=privileged: no pod-level securityContext restricts it (CKV_K8S_16)"
- "CKV_K8S_31=privileged containers run without seccomp whatever the profile says (CKV_K8S_16)"
- "CKV_K8S_8=it serves no HTTP: kubelet watches its device-plugin socket and marks its resources unhealthy when it goes"
- "CKV_K8S_9=kubelet offers its devices only once it has registered on the device-plugin socket (CKV_K8S_8)"
{{- if .root.Values.devicePlugin.hostNetwork }}
- "CKV_K8S_19=devicePlugin.hostNetwork (off by default): for nodes whose pods cannot reach the API server before the pod network runs"
{{- end }}
{{- if .hostPID }}
- "CKV_K8S_17=devicePlugin.mpsIsolation per-container: the MPS control daemons it starts must see the clients' host PIDs"
{{- end }}
{{- if not .root.Values.networkPolicy.enabled }}
- "CKV2_K8S_6=NetworkPolicies are off (networkPolicy.enabled: false); on, the device plugin admits nothing (kubelet reaches it by a socket)"
{{- end }}
{{- end -}}

{{- define "hami.monitorSkips" -}}
{{ include "hami.imageSkips" . }}
- "CKV_K8S_17=hostPID: the shim's regions name processes by host PID and start time, and only live ones count; the monitor reads them in the host's /proc"
- "CKV_K8S_23=root (uid 0, every capability dropped but three) to read and remove the directories of gone pods, owned by the users the GPU containers ran as"
- "CKV_K8S_40=it runs as uid 0, for the reason CKV_K8S_23 gives"
- "CKV_K8S_25=DAC_READ_SEARCH and DAC_OVERRIDE read and remove other users' container directories, FOWNER sets their modes; nothing else is added"
{{- if not .Values.networkPolicy.enabled }}
- "CKV2_K8S_6=NetworkPolicies are off (networkPolicy.enabled: false); on, they admit only Prometheus to the metrics port"
{{- end }}
{{- end -}}

{{- define "hami.mpsDaemonSkips" -}}
{{ include "hami.imageSkips" . }}
- "CKV_K8S_16=privileged: nvidia-smi -c EXCLUSIVE_PROCESS sets every GPU's compute mode, and the MPS server opens every /dev/nvidia* node"
- "CKV_K8S_20=privileged (CKV_K8S_16) implies privilege escalation"
- "CKV_K8S_37=privileged (CKV_K8S_16) holds every capability"
- "CKV_K8S_28=privileged (CKV_K8S_16) holds every capability, NET_RAW among them; the pod has no host network"
- "CKV_K8S_17=hostPID: the MPS server must see its clients' processes (NVIDIA runs it in the host PID namespace too)"
- "CKV_K8S_23=root: NVIDIA's MPS control daemon and nvidia-smi -c need it"
- "CKV_K8S_40=it runs as uid 0, for the reason CKV_K8S_23 gives"
- "CKV_K8S_22=nvidia-cuda-mps-control writes its pipes and logs where NVIDIA's runtime puts them"
- "CKV_K8S_29=privileged: no pod-level securityContext restricts it (CKV_K8S_16)"
- "CKV_K8S_31=privileged containers run without seccomp whatever the profile says (CKV_K8S_16)"
- "CKV_K8S_8=nvidia-cuda-mps-control -f has no health endpoint; the pod ends when the daemon does"
- "CKV_K8S_9=nvidia-cuda-mps-control -f has no readiness signal (CKV_K8S_8)"
{{- if not .Values.networkPolicy.enabled }}
- "CKV2_K8S_6=NetworkPolicies are off (networkPolicy.enabled: false); on, the MPS daemon admits nothing"
{{- end }}
{{- end -}}
