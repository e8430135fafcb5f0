/* region_layout: prints the C layout of the shared region as JSON, for the test that
 * compares it with the Python reader. */
#include <stddef.h>
#include <stdio.h>

#include "region_layout.h"

#define F(s, f) printf("%s\"" #s "." #f "\":[%zu,%zu]", first ? "" : ",", offsetof(struct s, f), sizeof(((struct s *)0)->f)), first = 0

int main(void)
{
    int first = 1;
    printf("{\"sizes\":{\"region_header\":%zu,\"region_device\":%zu,\"region_slot_device\":%zu,\"region_slot\":%zu,"
           "\"file\":%llu,\"file_v1\":%llu,\"oversub_offset\":%llu},\"constants\":{\"version\":%u,\"max_devices\":%u,\"max_slots\":%u,\"header_size\":%u,"
           "\"uuid_len\":%u,\"reason_len\":%u,\"devices_offset\":%zu},\"fields\":{",
           sizeof(struct region_header), sizeof(struct region_device), sizeof(struct region_slot_device),
           sizeof(struct region_slot), (unsigned long long)REGION_FILE_SIZE,
           (unsigned long long)REGION_V1_FILE_SIZE, (unsigned long long)REGION_OVERSUB_OFFSET, REGION_VERSION, REGION_MAX_DEVICES,
           REGION_MAX_SLOTS, REGION_HEADER_SIZE, REGION_UUID_LEN, REGION_REASON_LEN,
           offsetof(struct region_file, devices));
    F(region_header, magic); F(region_header, version); F(region_header, header_size);
    F(region_header, device_entry_size); F(region_header, max_devices); F(region_header, slot_size);
    F(region_header, max_slots); F(region_header, file_size); F(region_header, created_unix_ns);
    F(region_header, device_count); F(region_header, slot_hwm); F(region_header, flags);
    F(region_header, fence_reason);
    F(region_device, uuid); F(region_device, mem_limit); F(region_device, mem_total); F(region_device, tat_ns);
    F(region_device, sm_limit); F(region_device, flags); F(region_device, exited_busy_ns);
    F(region_device, exited_launches);
    F(region_slot_device, used_bytes); F(region_slot_device, untracked_bytes); F(region_slot_device, busy_ns);
    F(region_slot_device, launches);
    F(region_slot, pid); F(region_slot, flags); F(region_slot, start_time); F(region_slot, priority);
    F(region_slot, attach_unix_ns); F(region_slot, dev);
    printf("}}\n");
    return 0;
}
