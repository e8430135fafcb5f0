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
