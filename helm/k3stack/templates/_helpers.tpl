{{/* Chart name. */}}
{{- define "k3stack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Resource-name prefix: <release>-k3stack, or <release> when it already says k3stack. */}}
{{- define "k3stack.fullname" -}}
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

{{/* Name of one component: <fullname>-<component>. Call with (list $ "model"). */}}
{{- define "k3stack.componentName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "k3stack.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component. Call with (list $ "model"). */}}
{{- define "k3stack.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "k3stack.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* All labels of one component. Call with (list $ "model"). */}}
{{- define "k3stack.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "k3stack.selectorLabels" . }}
app.kubernetes.io/part-of: k3stack
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- end -}}

{{/* The Secret holding API keys and storage credentials. */}}
{{- define "k3stack.secretName" -}}
{{- default (include "k3stack.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "k3stack.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "k3stack.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Image of one service. Call with (list $ "model"). */}}
{{- define "k3stack.image" -}}
{{- $root := index . 0 -}}
{{- $img := (index $root.Values.services (index . 1)).image -}}
{{- $repo := $img.repository -}}
{{- if $root.Values.image.registry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $root.Values.image.registry) $repo -}}
{{- end -}}
{{- printf "%s:%s" $repo (default (default $root.Chart.AppVersion $root.Values.image.tag) $img.tag | toString) -}}
{{- end -}}

{{/* Pull policy of one service. Call with (list $ "model"). */}}
{{- define "k3stack.pullPolicy" -}}
{{- $root := index . 0 -}}
{{- default $root.Values.image.pullPolicy (index $root.Values.services (index . 1)).image.pullPolicy -}}
{{- end -}}

{{/*
A secret value: the explicit one, else the value already stored in the release's Secret (so
upgrades keep generated keys), else a new random one. Call with (list $ "KEY" explicitValue).
*/}}
{{- define "k3stack.secretValue" -}}
{{- $root := index . 0 -}}
{{- $key := index . 1 -}}
{{- $explicit := index . 2 -}}
{{- if $explicit -}}
{{- $explicit -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (include "k3stack.fullname" $root) -}}
{{- $stored := dig "data" $key "" $existing -}}
{{- if $stored -}}
{{- $stored | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* K3STACK_OBJECT_STORE_URL: the in-chart MinIO or the external endpoint. */}}
{{- define "k3stack.objectStoreUrl" -}}
{{- if .Values.minio.enabled -}}
{{- printf "http://%s:9000" (include "k3stack.componentName" (list . "minio")) -}}
{{- else -}}
{{- required "externalObjectStore.url is required when minio.enabled=false" .Values.externalObjectStore.url -}}
{{- end -}}
{{- end -}}

{{/* Volumes every k3stack pod of a service has. Call with (list $ "model"). */}}
{{- define "k3stack.volumes" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
- name: tmp
  emptyDir: {}
- name: data
{{- if $svc.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "k3stack.componentName" (list $root (printf "%s-data" $name)) }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- if $svc.shmSize }}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ $svc.shmSize }}
{{- end }}
{{- if and (eq $name "sandbox") $svc.kvm.enabled $svc.kvm.mountDevice }}
- name: kvm
  hostPath:
    path: {{ $svc.kvm.hostPath }}
    type: CharDevice
{{- end }}
{{- end -}}

{{/* Mounts matching k3stack.volumes. Call with (list $ "model"). */}}
{{- define "k3stack.volumeMounts" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: {{ $root.Values.config.dataDir }}
{{- if $svc.shmSize }}
- name: dshm
  mountPath: /dev/shm
{{- end }}
{{- if and (eq $name "sandbox") $svc.kvm.enabled $svc.kvm.mountDevice }}
- name: kvm
  mountPath: /dev/kvm
{{- end }}
{{- end -}}

{{/* Pod-level scheduling and security of a service's pods. Call with (list $ "model"). */}}
{{- define "k3stack.podCommon" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
serviceAccountName: {{ include "k3stack.serviceAccountName" $root }}
automountServiceAccountToken: false
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if eq $name "sandbox" }}
securityContext:
  runAsUser: 0
  runAsGroup: 0
  seccompProfile:
    type: RuntimeDefault
{{- else }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- end }}
{{- $nodeSelector := deepCopy $svc.nodeSelector -}}
{{- if and (eq $name "sandbox") $svc.kvm.enabled }}
{{- $nodeSelector = merge $nodeSelector $svc.kvm.nodeSelector -}}
{{- end }}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $svc.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $svc.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "k3stack.volumes" . | nindent 2 }}
{{- end -}}

{{/* Container security of a service. Call with (list $ "model"). */}}
{{- define "k3stack.containerSecurity" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
{{- if eq $name "sandbox" -}}
{{- if $svc.kvm.privileged -}}
privileged: true
{{- else -}}
allowPrivilegeEscalation: false
{{- end }}
{{- else -}}
{{- toYaml $root.Values.securityContext -}}
{{- end -}}
{{- end -}}

{{/* Environment sources of a service's containers. Call with (list $ "model"). */}}
{{- define "k3stack.envFrom" -}}
{{- $root := index . 0 -}}
- configMapRef:
    name: {{ include "k3stack.componentName" . }}
- secretRef:
    name: {{ include "k3stack.secretName" $root }}
{{- end -}}
