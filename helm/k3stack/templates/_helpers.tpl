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

{{/* Image of the secret-generator hook Job. */}}
{{- define "k3stack.generatorImage" -}}
{{- $img := .Values.secrets.generatorImage -}}
{{- $repo := $img.repository -}}
{{- if .Values.image.registry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .Values.image.registry) $repo -}}
{{- end -}}
{{- printf "%s:%s" $repo (default (default .Chart.AppVersion .Values.image.tag) $img.tag | toString) -}}
{{- end -}}

{{/* The Secret one component reads its credentials from: secrets.existingSecret, else the
component's own (<fullname>-<component>, made by the secretgen hook). Call with (list $ "tools"). */}}
{{- define "k3stack.credentialSecret" -}}
{{- $root := index . 0 -}}
{{- default (include "k3stack.componentName" .) $root.Values.secrets.existingSecret -}}
{{- end -}}

{{/* Components with credentials, as a JSON list. */}}
{{- define "k3stack.credentialComponents" -}}
{{- $list := keys .Values.services | sortAlpha -}}
{{- if .Values.postgresql.enabled }}{{ $list = append $list "postgresql" }}{{ end -}}
{{- if .Values.redis.enabled }}{{ $list = append $list "redis" }}{{ end -}}
{{- if .Values.minio.enabled }}{{ $list = concat $list (list "minio" "minio-bucket") }}{{ end -}}
{{- toJson $list -}}
{{- end -}}

{{/* The keys of one component's Secret, as JSON {"ENV_NAME": "value id"}; a value id names one
value shared by every Secret holding it. Only what the component needs: its own API key, those
of the services it calls, and its store credentials (none for the fenced sandbox).
Call with (list $ "tools"). */}}
{{- define "k3stack.credentialKeys" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- $keys := dict -}}
{{- if hasKey $root.Values.services $c -}}
{{- $svc := index $root.Values.services $c -}}
{{- $_ := set $keys (printf "K3STACK_%s__API_KEY" (upper $c)) (printf "api-key-%s" $c) -}}
{{- range $svc.calls -}}
{{- $_ := set $keys (printf "K3STACK_%s__API_KEY" (upper .)) (printf "api-key-%s" .) -}}
{{- end -}}
{{- if ne $c "sandbox" -}}
{{- if $root.Values.postgresql.enabled -}}
{{- $_ := set $keys "POSTGRES_PASSWORD" "postgres-password" -}}
{{- else -}}
{{- $_ := set $keys "K3STACK_DATABASE_URL" "database-url" -}}
{{- end -}}
{{- if $root.Values.redis.enabled -}}
{{- $_ := set $keys "REDIS_PASSWORD" "redis-password" -}}
{{- else -}}
{{- $_ := set $keys "K3STACK_BROKER_URL" "broker-url" -}}
{{- $_ := set $keys "K3STACK_RESULT_BACKEND" "result-backend" -}}
{{- end -}}
{{- $_ := set $keys "K3STACK_OBJECT_STORE_SECRET_KEY" "object-store-secret-key" -}}
{{- end -}}
{{- else if eq $c "postgresql" -}}
{{- $_ := set $keys "POSTGRES_PASSWORD" "postgres-password" -}}
{{- else if eq $c "redis" -}}
{{- $_ := set $keys "REDIS_PASSWORD" "redis-password" -}}
{{- else if eq $c "minio" -}}
{{- $_ := set $keys "MINIO_ROOT_PASSWORD" "minio-root-password" -}}
{{- else if eq $c "minio-bucket" -}}
{{- $_ := set $keys "MINIO_ROOT_PASSWORD" "minio-root-password" -}}
{{- $_ := set $keys "K3STACK_OBJECT_STORE_SECRET_KEY" "object-store-secret-key" -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{/* Credentials set in the values (value id -> value), as JSON; the secretgen hook uses them
instead of generating. Renders the same every time: checksums over it are stable. */}}
{{- define "k3stack.explicitCredentials" -}}
{{- $v := dict -}}
{{- range $name, $key := .Values.secrets.apiKeys -}}
{{- if $key }}{{ $_ := set $v (printf "api-key-%s" $name) $key }}{{ end -}}
{{- end -}}
{{- with .Values.postgresql.auth.password }}{{ $_ := set $v "postgres-password" . }}{{ end -}}
{{- with .Values.redis.password }}{{ $_ := set $v "redis-password" . }}{{ end -}}
{{- with .Values.minio.rootPassword }}{{ $_ := set $v "minio-root-password" . }}{{ end -}}
{{- with .Values.objectStore.secretKey }}{{ $_ := set $v "object-store-secret-key" . }}{{ end -}}
{{- if not .Values.postgresql.enabled -}}
{{- $_ := set $v "database-url" (required "externalDatabase.url is required when postgresql.enabled=false" .Values.externalDatabase.url) -}}
{{- end -}}
{{- if not .Values.redis.enabled -}}
{{- $_ := set $v "broker-url" (required "externalRedis.brokerUrl is required when redis.enabled=false" .Values.externalRedis.brokerUrl) -}}
{{- $_ := set $v "result-backend" (required "externalRedis.resultBackend is required when redis.enabled=false" .Values.externalRedis.resultBackend) -}}
{{- end -}}
{{- if not .Values.minio.enabled -}}
{{- $_ := set $v "object-store-secret-key" (required "objectStore.secretKey is required when minio.enabled=false" .Values.objectStore.secretKey) -}}
{{- end -}}
{{- toJson $v -}}
{{- end -}}

{{/* Pod annotation that rolls the pods when explicit credentials change (stable otherwise). */}}
{{- define "k3stack.credentialChecksum" -}}
{{- if not .Values.secrets.existingSecret -}}
checksum/credentials: {{ include "k3stack.explicitCredentials" . | sha256sum }}
{{- end -}}
{{- end -}}

{{/* Environment entries of one component's credentials, key by key from its Secret, then the
store URLs built from them (Kubernetes expands $(VAR) from earlier entries).
Call with (list $ "tools"). */}}
{{- define "k3stack.credentialEnv" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- $secret := include "k3stack.credentialSecret" . -}}
{{- range $env, $_ := include "k3stack.credentialKeys" . | fromJson }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $env }}
{{- end }}
{{- if and (hasKey $root.Values.services $c) (ne $c "sandbox") }}
{{- if $root.Values.postgresql.enabled }}
{{- $pg := $root.Values.postgresql.auth }}
- name: K3STACK_DATABASE_URL
  value: {{ printf "postgresql+psycopg://%s:$(POSTGRES_PASSWORD)@%s:5432/%s" $pg.username (include "k3stack.componentName" (list $root "postgresql")) $pg.database | quote }}
{{- end }}
{{- if $root.Values.redis.enabled }}
{{- $redis := include "k3stack.componentName" (list $root "redis") }}
- name: K3STACK_BROKER_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s:6379/0" $redis | quote }}
- name: K3STACK_RESULT_BACKEND
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s:6379/1" $redis | quote }}
{{- end }}
{{- end }}
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
{{- if eq $name "sandbox" }}
- name: cache
{{- if $svc.cache.persistent }}
  persistentVolumeClaim:
    claimName: {{ include "k3stack.componentName" (list $root "sandbox-cache") }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- if and $svc.kvm.enabled $svc.kvm.mountDevice }}
- name: kvm
  hostPath:
    path: {{ $svc.kvm.hostPath }}
    type: CharDevice
{{- end }}
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
{{- if eq $name "sandbox" }}
- name: cache
  mountPath: /var/cache/k3stack
{{- if and $svc.kvm.enabled $svc.kvm.mountDevice }}
- name: kvm
  mountPath: /dev/kvm
{{- end }}
{{- end }}
{{- end -}}

{{/* Soft spreading of one component's pods over nodes and zones. Call with (list $ "model"). */}}
{{- define "k3stack.topologySpread" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.topologySpread.enabled }}
topologySpreadConstraints:
{{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
  - maxSkew: {{ $root.Values.topologySpread.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "k3stack.selectorLabels" (list $root (index $ 1)) | nindent 8 }}
{{- end }}
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

{{/* Container security of a service. The sandbox runs as root (QEMU) with every capability
dropped; privileged only as the documented hostPath fallback. Call with (list $ "model"). */}}
{{- define "k3stack.containerSecurity" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
{{- if and (eq $name "sandbox") $svc.kvm.enabled $svc.kvm.mountDevice $svc.kvm.privileged -}}
privileged: true
{{- else if eq $name "sandbox" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- else -}}
{{- toYaml $root.Values.securityContext -}}
{{- end -}}
{{- end -}}

{{/* Resources of a service's API container; the sandbox requests the KVM device plugin's
resource when it uses one. Call with (list $ "model"). */}}
{{- define "k3stack.apiResources" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
{{- $res := deepCopy $svc.resources -}}
{{- if and (eq $name "sandbox") $svc.kvm.enabled (not $svc.kvm.mountDevice) -}}
{{- $_ := set $res "requests" (merge (dict $svc.kvm.resourceName "1") (default dict $res.requests)) -}}
{{- $_ := set $res "limits" (merge (dict $svc.kvm.resourceName "1") (default dict $res.limits)) -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{/* Environment of a service's containers: its ConfigMap, then its credentials key by key.
Call with (list $ "model"); nindent the two parts separately (envFrom, env). */}}
{{- define "k3stack.envFrom" -}}
- configMapRef:
    name: {{ include "k3stack.componentName" . }}
{{- end -}}
