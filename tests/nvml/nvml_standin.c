/*
 * libnvidia-ml.so.1 TEST DOUBLE (KUBEGPU_SIMULATED): no GPU, no driver.
 *
 * Answers the NVML calls that NVIDIA's GPU Feature Discovery and device plugin make, from a data
 * file generated from a real nvidia-smi capture (tests/nvml/capture_to_data.py). The file's path
 * comes from KUBEGPU_NVML_DATA (default KUBEGPU_NVML_DEFAULT_DATA below). What the capture cannot
 * answer returns NVML_ERROR_NOT_SUPPORTED, as a real NVML does for an unsupported query. Every
 * line this library prints carries the marker KUBEGPU_SIMULATED.
 *
 * Built against nvml.h from the go-nvml module that the device plugin's build uses, so the types
 * are NVIDIA's own (tests/nvml/build.py).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nvml.h"

#define EXPORT __attribute__((visibility("default")))
#define MARKER "KUBEGPU_SIMULATED"
#define KUBEGPU_NVML_DEFAULT_DATA "/usr/share/kubegpu/nvml-standin.data"
#define MAX_DEVICES 16
#define MAX_MIG 8
#define TEXT 96

struct nvmlDevice_st {
    unsigned int index;
    char name[TEXT];
    char uuid[TEXT];
    char pci_bus_id[TEXT];
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    unsigned int minor_number;
    nvmlBrandType_t brand;
    nvmlDeviceArchitecture_t architecture;
    unsigned long long memory_total_mib;
    unsigned long long memory_reserved_mib;
    unsigned long long memory_used_mib;
    unsigned long long memory_free_mib;
    int mig_mode; /* -1 unsupported, 0 disabled, 1 enabled */
    int compute_major;
    int compute_minor;
    nvmlGpuVirtualizationMode_t virtualization_mode;
    unsigned int max_mig_devices;
    unsigned int mig_count;
    /* a MIG device: its parent, ids, shared engines and GPU instance slices */
    struct nvmlDevice_st *parent;
    unsigned int gpu_instance_id;
    unsigned int compute_instance_id;
    unsigned int multiprocessor_count;
    unsigned int copy_engine_count;
    unsigned int encoder_count;
    unsigned int decoder_count;
    unsigned int ofa_count;
    unsigned int jpg_count;
    unsigned int slices;
};

struct nvmlGpuInstance_st {
    struct nvmlDevice_st *mig;
};

struct nvmlComputeInstance_st {
    struct nvmlDevice_st *mig;
};

struct nvmlEventSet_st {
    unsigned long long registered;
};

static struct {
    unsigned int init_count;
    char driver_version[TEXT];
    int cuda_driver_version;
    char capture[512];
    unsigned int device_count;
    struct nvmlDevice_st devices[MAX_DEVICES];
    struct nvmlDevice_st migs[MAX_DEVICES * MAX_MIG];
    struct nvmlGpuInstance_st gpu_instances[MAX_DEVICES * MAX_MIG];
    struct nvmlComputeInstance_st compute_instances[MAX_DEVICES * MAX_MIG];
} state;

static void say(const char *format, ...)
{
    va_list args;
    fprintf(stderr, "libnvidia-ml.so.1 test double [" MARKER "]: ");
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
}

static int tracing(void)
{
    const char *trace = getenv("KUBEGPU_NVML_TRACE");
    return trace != NULL && strcmp(trace, "1") == 0;
}

/* A query the capture cannot answer: what a real NVML says when a GPU does not support it. */
static nvmlReturn_t unsupported(const char *function)
{
    if (tracing())
        say("%s: NVML_ERROR_NOT_SUPPORTED (not in the capture)", function);
    return NVML_ERROR_NOT_SUPPORTED;
}
#define UNSUPPORTED() unsupported(__func__)
/* What a MIG device handle cannot answer here (the capture lists no MIG names or UUIDs). */
#define FULL_GPU_ONLY()                                                                         \
    do {                                                                                        \
        if (dev->parent != NULL)                                                                \
            return UNSUPPORTED();                                                               \
    } while (0)

static int lookup(const char *table[], const unsigned int values[], size_t n, const char *text,
                  unsigned int *out)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(table[i], text) == 0) {
            *out = values[i];
            return 0;
        }
    }
    return -1;
}

static const char *brand_names[] = {"NVIDIA", "Tesla", "Quadro", "GeForce", "NVIDIA RTX", "Titan"};
static const unsigned int brand_values[] = {NVML_BRAND_NVIDIA, NVML_BRAND_TESLA,
                                            NVML_BRAND_QUADRO, NVML_BRAND_GEFORCE,
                                            NVML_BRAND_NVIDIA_RTX, NVML_BRAND_TITAN};
static const char *arch_names[] = {"Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace",
                                   "Hopper"};
static const unsigned int arch_values[] = {NVML_DEVICE_ARCH_PASCAL, NVML_DEVICE_ARCH_VOLTA,
                                           NVML_DEVICE_ARCH_TURING, NVML_DEVICE_ARCH_AMPERE,
                                           NVML_DEVICE_ARCH_ADA, NVML_DEVICE_ARCH_HOPPER};

static int copy_text(char *to, const char *value, const char *key, const char *path, int line)
{
    if (strlen(value) >= TEXT) {
        say("%s:%d: %s is longer than %d characters", path, line, key, TEXT - 1);
        return -1;
    }
    strcpy(to, value);
    return 0;
}

static int parse_number(const char *value, unsigned long long *out)
{
    char *end;
    errno = 0;
    *out = strtoull(value, &end, 0);
    return (errno != 0 || end == value || *end != '\0') ? -1 : 0;
}

static int set_device_field(struct nvmlDevice_st *d, const char *field, const char *value,
                            const char *path, int line)
{
    unsigned long long number = 0;
    unsigned int mapped;
    if (strcmp(field, "name") == 0)
        return copy_text(d->name, value, field, path, line);
    if (strcmp(field, "uuid") == 0)
        return copy_text(d->uuid, value, field, path, line);
    if (strcmp(field, "pci_bus_id") == 0)
        return copy_text(d->pci_bus_id, value, field, path, line);
    if (strcmp(field, "brand") == 0) {
        if (lookup(brand_names, brand_values, sizeof brand_values / sizeof *brand_values, value,
                   &mapped) != 0)
            goto bad;
        d->brand = mapped;
        return 0;
    }
    if (strcmp(field, "architecture") == 0) {
        if (lookup(arch_names, arch_values, sizeof arch_values / sizeof *arch_values, value,
                   &mapped) != 0)
            goto bad;
        d->architecture = mapped;
        return 0;
    }
    if (strcmp(field, "mig_mode") == 0) {
        if (strcmp(value, "unsupported") == 0)
            d->mig_mode = -1;
        else if (strcmp(value, "disabled") == 0)
            d->mig_mode = NVML_DEVICE_MIG_DISABLE;
        else if (strcmp(value, "enabled") == 0)
            d->mig_mode = NVML_DEVICE_MIG_ENABLE;
        else
            goto bad;
        return 0;
    }
    if (parse_number(value, &number) != 0)
        goto bad;
    if (strcmp(field, "pci_device_id") == 0)
        d->pci_device_id = (unsigned int)number;
    else if (strcmp(field, "pci_subsystem_id") == 0)
        d->pci_subsystem_id = (unsigned int)number;
    else if (strcmp(field, "minor_number") == 0)
        d->minor_number = (unsigned int)number;
    else if (strcmp(field, "memory_total_mib") == 0)
        d->memory_total_mib = number;
    else if (strcmp(field, "memory_reserved_mib") == 0)
        d->memory_reserved_mib = number;
    else if (strcmp(field, "memory_used_mib") == 0)
        d->memory_used_mib = number;
    else if (strcmp(field, "memory_free_mib") == 0)
        d->memory_free_mib = number;
    else if (strcmp(field, "compute_major") == 0)
        d->compute_major = (int)number;
    else if (strcmp(field, "compute_minor") == 0)
        d->compute_minor = (int)number;
    else if (strcmp(field, "virtualization_mode") == 0)
        d->virtualization_mode = (nvmlGpuVirtualizationMode_t)number;
    else if (strcmp(field, "max_mig_devices") == 0 && number <= MAX_MIG)
        d->max_mig_devices = (unsigned int)number;
    else if (strcmp(field, "gpu_instance_id") == 0)
        d->gpu_instance_id = (unsigned int)number;
    else if (strcmp(field, "compute_instance_id") == 0)
        d->compute_instance_id = (unsigned int)number;
    else if (strcmp(field, "multiprocessor_count") == 0)
        d->multiprocessor_count = (unsigned int)number;
    else if (strcmp(field, "copy_engine_count") == 0)
        d->copy_engine_count = (unsigned int)number;
    else if (strcmp(field, "encoder_count") == 0)
        d->encoder_count = (unsigned int)number;
    else if (strcmp(field, "decoder_count") == 0)
        d->decoder_count = (unsigned int)number;
    else if (strcmp(field, "ofa_count") == 0)
        d->ofa_count = (unsigned int)number;
    else if (strcmp(field, "jpg_count") == 0)
        d->jpg_count = (unsigned int)number;
    else if (strcmp(field, "slices") == 0)
        d->slices = (unsigned int)number;
    else {
        say("%s:%d: unknown device field %s", path, line, field);
        return -1;
    }
    return 0;
bad:
    say("%s:%d: device field %s has a value it cannot take: %s", path, line, field, value);
    return -1;
}

static int load(const char *path)
{
    char buffer[1024];
    int line = 0, simulated = 0, failed = 0;
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        say("cannot read the data file %s (KUBEGPU_NVML_DATA): %s", path, strerror(errno));
        return -1;
    }
    memset(&state.devices, 0, sizeof state.devices);
    memset(&state.migs, 0, sizeof state.migs);
    state.device_count = 0;
    while (!failed && fgets(buffer, sizeof buffer, file) != NULL) {
        char *key = buffer, *value;
        unsigned long long number;
        line++;
        buffer[strcspn(buffer, "\n")] = '\0';
        if (buffer[0] == '#' || buffer[0] == '\0')
            continue;
        value = strchr(buffer, '=');
        if (value == NULL) {
            say("%s:%d: expected key=value", path, line);
            failed = 1;
            break;
        }
        *value++ = '\0';
        if (strcmp(key, "simulated") == 0) {
            simulated = strcmp(value, MARKER) == 0;
        } else if (strcmp(key, "capture") == 0) {
            snprintf(state.capture, sizeof state.capture, "%s", value);
        } else if (strcmp(key, "driver_version") == 0) {
            failed = copy_text(state.driver_version, value, key, path, line) != 0;
        } else if (strcmp(key, "cuda_driver_version") == 0) {
            failed = parse_number(value, &number) != 0;
            state.cuda_driver_version = (int)number;
        } else if (strcmp(key, "device_count") == 0) {
            failed = parse_number(value, &number) != 0 || number > MAX_DEVICES;
            state.device_count = (unsigned int)number;
        } else if (strncmp(key, "device.", 7) == 0) {
            char *end;
            unsigned long index = strtoul(key + 7, &end, 10);
            if (*end != '.' || index >= MAX_DEVICES) {
                say("%s:%d: bad device key %s (device.<0..%d>.<field>)", path, line, key,
                    MAX_DEVICES - 1);
                failed = 1;
            } else if (strncmp(end + 1, "mig.", 4) == 0) {
                char *rest;
                unsigned long number = strtoul(end + 5, &rest, 10);
                if (*rest != '.' || number >= MAX_MIG) {
                    say("%s:%d: bad MIG key %s (device.<i>.mig.<0..%d>.<field>)", path, line, key,
                        MAX_MIG - 1);
                    failed = 1;
                } else {
                    struct nvmlDevice_st *mig = &state.migs[index * MAX_MIG + number];
                    mig->parent = &state.devices[index];
                    mig->index = (unsigned int)number;
                    if (number + 1 > state.devices[index].mig_count)
                        state.devices[index].mig_count = (unsigned int)number + 1;
                    failed = set_device_field(mig, rest + 1, value, path, line);
                }
            } else {
                state.devices[index].index = (unsigned int)index;
                failed = set_device_field(&state.devices[index], end + 1, value, path, line);
            }
        } else {
            say("%s:%d: unknown key %s", path, line, key);
            failed = 1;
        }
        if (failed)
            say("%s:%d: cannot use %s=%s", path, line, key, value);
    }
    fclose(file);
    if (!failed && !simulated) {
        say("%s has no simulated=" MARKER " line: not a data file of this test double", path);
        failed = 1;
    }
    for (unsigned int i = 0; !failed && i < state.device_count; i++) {
        if (state.devices[i].uuid[0] == '\0' || state.devices[i].name[0] == '\0') {
            say("%s: device %u has no name or uuid (device_count=%u)", path, i,
                state.device_count);
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

/* go-nvml's nvml.h wraps each handle in a struct of one pointer: the same ABI as NVIDIA's. */
static nvmlReturn_t check_device(const struct nvmlDevice_st *dev)
{
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (dev >= state.devices && dev < state.devices + state.device_count)
        return NVML_SUCCESS;
    if (dev >= state.migs && dev < state.migs + MAX_DEVICES * MAX_MIG && dev->parent != NULL)
        return NVML_SUCCESS;
    return NVML_ERROR_INVALID_ARGUMENT;
}
#define CHECK(device)                                                                           \
    const struct nvmlDevice_st *dev = (device).handle;                                          \
    (void)dev;                                                                                  \
    do {                                                                                        \
        nvmlReturn_t checked = check_device(dev);                                               \
        if (checked != NVML_SUCCESS)                                                            \
            return checked;                                                                     \
    } while (0)

static nvmlReturn_t put_text(char *out, unsigned int length, const char *value)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

/* ---- initialisation ---- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    const char *path = getenv("KUBEGPU_NVML_DATA");
    (void)flags;
    if (state.init_count > 0) {
        state.init_count++;
        return NVML_SUCCESS;
    }
    if (path == NULL || path[0] == '\0')
        path = KUBEGPU_NVML_DEFAULT_DATA;
    if (load(path) != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    state.init_count = 1;
    say("%u GPU(s) from %s (capture %s), driver %s", state.device_count, path, state.capture,
        state.driver_version);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    state.init_count--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    default:
        return "Unknown Error";
    }
}

/* ---- system ---- */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    return put_text(version, length, state.driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    *version = state.cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    (void)version;
    (void)length;
    return UNSUPPORTED();
}

/* ---- device handles ---- */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    *count = state.device_count;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= state.device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    device->handle = &state.devices[index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned int i = 0; i < state.device_count; i++) {
        if (strcmp(state.devices[i].uuid, uuid) == 0) {
            device->handle = &state.devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    if (bus_id == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned int i = 0; i < state.device_count; i++) {
        const char *own = state.devices[i].pci_bus_id;
        /* NVML accepts the full domain form and the short bus:device.function form. */
        size_t skip = strlen(own) > strlen(bus_id) ? strlen(own) - strlen(bus_id) : 0;
        if (strcasecmp(own + skip, bus_id) == 0) {
            device->handle = &state.devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

/* ---- device identity ---- */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    CHECK(device);
    FULL_GPU_ONLY();
    return put_text(name, length, dev->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK(device);
    FULL_GPU_ONLY();
    return put_text(uuid, length, dev->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = dev->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = dev->minor_number;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *brand)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (brand == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *brand = dev->brand;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (arch == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = dev->architecture;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (major == NULL || minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = dev->compute_major;
    *minor = dev->compute_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    unsigned int domain = 0, bus = 0, slot = 0, function = 0;
    CHECK(device);
    FULL_GPU_ONLY();
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    if (sscanf(dev->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
        return NVML_ERROR_UNKNOWN;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", domain, bus, slot, function);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain & 0xFFFF,
             bus, slot, function);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = slot;
    pci->pciDeviceId = dev->pci_device_id;
    pci->pciSubSystemId = dev->pci_subsystem_id;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

#define MIB (1024ULL * 1024ULL)

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = dev->memory_total_mib * MIB;
    memory->free = dev->memory_free_mib * MIB;
    /* v1 counts the reserved memory as used: total - free. */
    memory->used = memory->total - memory->free;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = dev->memory_total_mib * MIB;
    memory->reserved = dev->memory_reserved_mib * MIB;
    memory->free = dev->memory_free_mib * MIB;
    memory->used = dev->memory_used_mib * MIB;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device,
                                                    nvmlGpuVirtualizationMode_t *mode)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (mode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = dev->virtualization_mode;
    return NVML_SUCCESS;
}

/* ---- MIG: the mode, and the MIG devices the capture lists (no MIG UUIDs in it) ---- */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending)
{
    CHECK(device);
    if (current == NULL || pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->parent != NULL || dev->mig_mode < 0)
        return UNSUPPORTED();
    *current = *pending = (unsigned int)dev->mig_mode;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig)
{
    CHECK(device);
    if (is_mig == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = dev->parent != NULL;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    CHECK(device);
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->parent != NULL || dev->max_mig_devices == 0)
        return UNSUPPORTED();
    *count = dev->max_mig_devices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig)
{
    CHECK(device);
    if (mig == NULL || dev->parent != NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->max_mig_devices == 0)
        return UNSUPPORTED();
    if (index >= dev->max_mig_devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= dev->mig_count)
        return NVML_ERROR_NOT_FOUND;
    mig->handle = &state.migs[(dev - state.devices) * MAX_MIG + index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t device,
                                                                 nvmlDevice_t *parent)
{
    CHECK(device);
    if (parent == NULL || dev->parent == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    parent->handle = dev->parent;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK(device);
    if (id == NULL || dev->parent == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = dev->gpu_instance_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK(device);
    if (id == NULL || dev->parent == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = dev->compute_instance_id;
    return NVML_SUCCESS;
}

/* nvml.h's profile ids by slice count: GPU and compute instance profiles number alike. */
static int profile_of(unsigned int slices)
{
    switch (slices) {
    case 1:
        return NVML_GPU_INSTANCE_PROFILE_1_SLICE;
    case 2:
        return NVML_GPU_INSTANCE_PROFILE_2_SLICE;
    case 3:
        return NVML_GPU_INSTANCE_PROFILE_3_SLICE;
    case 4:
        return NVML_GPU_INSTANCE_PROFILE_4_SLICE;
    case 7:
        return NVML_GPU_INSTANCE_PROFILE_7_SLICE;
    default:
        return -1;
    }
}

static const struct nvmlDevice_st *mig_with_profile(const struct nvmlDevice_st *parent,
                                                    unsigned int profile)
{
    for (unsigned int i = 0; i < parent->mig_count; i++) {
        const struct nvmlDevice_st *mig = &state.migs[(parent - state.devices) * MAX_MIG + i];
        if (profile_of(mig->slices) == (int)profile)
            return mig;
    }
    return NULL;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                        nvmlGpuInstanceProfileInfo_t *info)
{
    const struct nvmlDevice_st *mig;
    CHECK(device);
    if (info == NULL || dev->parent != NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Only the profiles of the capture's MIG devices are known. */
    mig = mig_with_profile(dev, profile);
    if (mig == NULL)
        return UNSUPPORTED();
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = mig->slices;
    info->multiprocessorCount = mig->multiprocessor_count;
    info->copyEngineCount = mig->copy_engine_count;
    info->decoderCount = mig->decoder_count;
    info->encoderCount = mig->encoder_count;
    info->jpegCount = mig->jpg_count;
    info->ofaCount = mig->ofa_count;
    info->memorySizeMB = mig->memory_total_mib;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *gpu_instance)
{
    CHECK(device);
    if (gpu_instance == NULL || dev->parent != NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < dev->mig_count; i++) {
        size_t k = (size_t)(dev - state.devices) * MAX_MIG + i;
        if (state.migs[k].gpu_instance_id == id) {
            state.gpu_instances[k].mig = &state.migs[k];
            gpu_instance->handle = &state.gpu_instances[k];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpu_instance,
                                           nvmlGpuInstanceInfo_t *info)
{
    const struct nvmlDevice_st *mig;
    if (gpu_instance.handle == NULL || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    mig = gpu_instance.handle->mig;
    memset(info, 0, sizeof *info);
    info->device.handle = mig->parent;
    info->id = mig->gpu_instance_id;
    info->profileId = (unsigned int)profile_of(mig->slices);
    /* placement: not in the capture, left 0 */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpu_instance,
                                                          unsigned int id,
                                                          nvmlComputeInstance_t *compute_instance)
{
    struct nvmlDevice_st *mig;
    if (gpu_instance.handle == NULL || compute_instance == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    mig = gpu_instance.handle->mig;
    if (mig->compute_instance_id != id)
        return NVML_ERROR_NOT_FOUND;
    state.compute_instances[gpu_instance.handle - state.gpu_instances].mig = mig;
    compute_instance->handle = &state.compute_instances[gpu_instance.handle - state.gpu_instances];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpu_instance, unsigned int profile, unsigned int engine_profile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    const struct nvmlDevice_st *mig;
    if (gpu_instance.handle == NULL || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    mig = gpu_instance.handle->mig;
    /* The capture's compute instance spans its whole GPU instance, engines shared. */
    if ((int)profile != profile_of(mig->slices) ||
        engine_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return UNSUPPORTED();
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = mig->slices;
    info->multiprocessorCount = mig->multiprocessor_count;
    info->sharedCopyEngineCount = mig->copy_engine_count;
    info->sharedDecoderCount = mig->decoder_count;
    info->sharedEncoderCount = mig->encoder_count;
    info->sharedJpegCount = mig->jpg_count;
    info->sharedOfaCount = mig->ofa_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t compute_instance,
                                                  nvmlComputeInstanceInfo_t *info)
{
    struct nvmlDevice_st *mig;
    if (compute_instance.handle == NULL || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    mig = compute_instance.handle->mig;
    memset(info, 0, sizeof *info);
    info->device.handle = mig->parent;
    info->gpuInstance.handle = &state.gpu_instances[compute_instance.handle - state.compute_instances];
    info->id = mig->compute_instance_id;
    info->profileId = (unsigned int)profile_of(mig->slices);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t compute_instance,
                                               nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(compute_instance, info);
}

/* ---- events: none ever arrive (a healthy GPU), so a wait times out ---- */

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state.init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    set->handle = calloc(1, sizeof *set->handle);
    return set->handle == NULL ? NVML_ERROR_MEMORY : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    free(set.handle);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                     unsigned long long *types)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (types == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* The capture shows ECC enabled: Xid and ECC events are what such a GPU supports. */
    *types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
             nvmlEventTypeSingleBitEccError;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                             nvmlEventSet_t set)
{
    CHECK(device);
    FULL_GPU_ONLY();
    if (set.handle == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    set.handle->registered |= types;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeout_ms)
{
    struct timespec pause = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    if (set.handle == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    nanosleep(&pause, NULL);
    return NVML_ERROR_TIMEOUT;
}
EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                     unsigned int timeout_ms)
{
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}

/* ---- device attributes, and queries a replayed nvidia-smi capture cannot answer ---- */

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *a)
{
    CHECK(device);
    if (a == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* A MIG device's attributes are in the capture; a full GPU's are not. */
    if (dev->parent == NULL)
        return UNSUPPORTED();
    a->multiprocessorCount = dev->multiprocessor_count;
    a->sharedCopyEngineCount = dev->copy_engine_count;
    a->sharedDecoderCount = dev->decoder_count;
    a->sharedEncoderCount = dev->encoder_count;
    a->sharedJpegCount = dev->jpg_count;
    a->sharedOfaCount = dev->ofa_count;
    a->gpuInstanceSliceCount = dev->slices;
    a->computeInstanceSliceCount = dev->slices;
    a->memorySizeMB = dev->memory_total_mib;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *a)
{
    return nvmlDeviceGetAttributes_v2(device, a);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    CHECK(device);
    (void)info;
    return UNSUPPORTED();
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info)
{
    CHECK(device);
    (void)info;
    return UNSUPPORTED();
}
