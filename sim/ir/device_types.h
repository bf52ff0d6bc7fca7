/* device_types.h - figures of the built-in device types that the device type
 * itself does not carry (sim/ir/device_types.c holds the table and the
 * sources): the dense FP4 rate of Blackwell GPUs (the model IR has no fp4
 * dtype yet) and the NVLink bandwidth per GPU that the cluster presets use. */
#ifndef PSIM_DEVICE_TYPES_H
#define PSIM_DEVICE_TYPES_H

/* Dense NVFP4 FLOP/s of built-in type name; 0 when it has none or is unknown. */
double psim_device_type_builtin_fp4(const char *name);
/* NVLink bandwidth per GPU, bytes/s per direction; 0 when none or unknown. */
double psim_device_type_builtin_nvlink(const char *name);

#endif
