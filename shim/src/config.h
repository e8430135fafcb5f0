/*
 * Limits and settings from the environment (PROTOCOL.md section 7, SHIM.md "Contract").
 * Parsing is strict: a value that does not parse is reported, never guessed.
 */
#ifndef HAMI_CONFIG_H
#define HAMI_CONFIG_H

#include <stdint.h>

#define CFG_MAX_VISIBLE 64
#define CFG_UUID_LEN 96
#define CFG_REASON_LEN 192
#define CFG_DEFAULT_REGION_PATH "/tmp/hami-vgpu.region"
#define CFG_DEFAULT_LOCK_TIMEOUT_MS 5000
#define CFG_DEFAULT_RECONCILE_MS 1000
/* Task priority signalling (priority.h), as the device plugin mounts it. */
#define CFG_DEFAULT_PRIORITY_BOARD "/usr/local/vgpu/priority"
#define CFG_DEFAULT_PRIORITY_BEAT "/usr/local/vgpu/priority-beat"

typedef enum { POLICY_DEFAULT = 0, POLICY_FORCE = 1, POLICY_DISABLE = 2 } core_policy;

typedef enum { LIMIT_OK = 0, LIMIT_MISSING = 1, LIMIT_MALFORMED = 2 } limit_state;

typedef struct {
    int disabled;                 /* CUDA_DISABLE_CONTROL=true: pure pass-through */
    char region_path[4096];       /* CUDA_DEVICE_MEMORY_SHARED_CACHE */
    core_policy policy;           /* GPU_CORE_UTILIZATION_POLICY */
    int priority;                 /* CUDA_TASK_PRIORITY, -1 when unset or malformed */
    char priority_board_dir[2048]; /* HAMI_SHIM_PRIORITY_DIR: every container's view, read-only */
    char priority_beat_dir[2048];  /* HAMI_SHIM_PRIORITY_BEAT_DIR: a high container's own entries */
    int lock_timeout_ms;          /* HAMI_SHIM_LOCK_TIMEOUT_MS */
    int reconcile_ms;             /* HAMI_SHIM_RECONCILE_MS, -1 = never */
    int sm_configured;            /* some SM/core limit variable is present */
    int oversubscribe;            /* CUDA_OVERSUBSCRIBE=true: host-backed memory past the GPU's */
    int n_visible;                /* NVIDIA_VISIBLE_DEVICES, when it is a UUID list */
    char visible[CFG_MAX_VISIBLE][CFG_UUID_LEN];
} shim_config;

typedef struct {
    limit_state mem_state;
    uint64_t mem_bytes;           /* valid when mem_state == LIMIT_OK */
    limit_state sm_state;         /* LIMIT_MISSING means "no compute limit" */
    int sm_percent;               /* 1..99 throttles; 0 and 100 mean unlimited */
    char reason[CFG_REASON_LEN];  /* why the device fails closed, for the log and region */
} device_limits;

/* Parses the process environment. Never fails; problems are logged. */
void config_load(shim_config *cfg);

/* 1 when the limits came from the device plugin's read-only limits file (the
 * environment's copies of the shim's variables are then ignored). */
int config_limits_from_file(void);

/* Limits of the container's device number `index` (-1: not in the container's list,
 * only the all-device defaults apply). */
void config_device_limits(int index, device_limits *out);

/* Index of `uuid` in NVIDIA_VISIBLE_DEVICES, or -1. */
int config_visible_index(const shim_config *cfg, const char *uuid);

/* "<digits>[kKmMgG]" (binary multiples) into bytes; 0 on success, -1 when malformed
 * or overflowing. */
int config_parse_size(const char *s, uint64_t *out);

/* "<digits>" in 0..100; 0 on success, -1 when malformed. */
int config_parse_percent(const char *s, int *out);

#endif
