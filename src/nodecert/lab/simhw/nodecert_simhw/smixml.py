"""The XML tags of `nvidia-smi -q -x` for the fields `-q` prints as labels.

The XML names most fields with tags of their own that do not follow from the labels
(nvsmi_device_v12/v13: `<mig_mode><current_mig>`, `<pci_gpu_link_info><pcie_gen>
<max_link_gen>`, `<utilization><gpu_util>` ...). The table is keyed by the parent
element's tag and the label made into a tag; a value with "/" is a section in the XML
that `-q` prints as one line. Every path the simulator writes occurs in a real output
(tests/fixtures/real/nvidia-smi/*.xml; the simulator's tests hold it).
"""

CLOCKS = {"graphics": "graphics_clock", "sm": "sm_clock", "memory": "mem_clock",
          "video": "video_clock"}
DM = {"current": "current_dm", "pending": "pending_dm"}
GOM = {"current": "current_gom", "pending": "pending_gom"}
SESSIONS = {"active_sessions": "session_count"}

IN_PARENT = {
    "clocks": CLOCKS, "applications_clocks": CLOCKS, "default_applications_clocks": CLOCKS,
    "deferred_clocks": CLOCKS, "max_clocks": CLOCKS, "max_customer_boost_clocks": CLOCKS,
    "clocks_event_reasons": {
        "idle": "clocks_event_reason_gpu_idle",
        "applications_clocks_setting": "clocks_event_reason_applications_clocks_setting",
        "sw_power_cap": "clocks_event_reason_sw_power_cap",
        "hw_slowdown": "clocks_event_reason_hw_slowdown",
        "hw_thermal_slowdown": "clocks_event_reason_hw_thermal_slowdown",
        "hw_power_brake_slowdown": "clocks_event_reason_hw_power_brake_slowdown",
        "sync_boost": "clocks_event_reason_sync_boost",
        "sw_thermal_slowdown": "clocks_event_reason_sw_thermal_slowdown",
        "display_clock_setting": "clocks_event_reason_display_clocks_setting"},
    "driver_model": DM, "gpu_operation_mode": GOM,
    "ecc_mode": {"current": "current_ecc", "pending": "pending_ecc"},
    "mig_mode": {"current": "current_mig", "pending": "pending_mig"},
    "volatile": {"sram_uncorrectable_sec_ded": "sram_uncorrectable_secded"},
    "aggregate": {"sram_uncorrectable_sec_ded": "sram_uncorrectable_secded"},
    "encoder_stats": SESSIONS, "fbc_stats": SESSIONS,
    "fabric": {"cliqueid": "cliqueId", "clusteruuid": "clusterUuid"},
    "gpu_memory_power_readings": {"power_draw": "average_power_draw"},
    "inforom_version": {"image_version": "img_version",
                        "power_management_object": "pwr_object"},
    "pci": {"bus": "pci_bus", "device": "pci_device", "domain": "pci_domain",
            "base_classcode": "pci_base_class", "sub_classcode": "pci_sub_class",
            "bridge_chip": "pci_bridge_chip", "gpu_link_info": "pci_gpu_link_info",
            "replays_since_reset": "replay_counter",
            "replay_number_rollovers": "replay_rollover_counter",
            "tx_throughput": "tx_util", "rx_throughput": "rx_util"},
    "pci_bridge_chip": {"type": "bridge_chip_type", "firmware": "bridge_chip_fw"},
    "pci_gpu_link_info": {"pcie_generation": "pcie_gen", "link_width": "link_widths"},
    "pcie_gen": {"max": "max_link_gen", "current": "current_link_gen",
                 "device_current": "device_current_link_gen",
                 "device_max": "max_device_link_gen", "host_max": "max_host_link_gen"},
    "link_widths": {"max": "max_link_width", "current": "current_link_width"},
    "platforminfo": {"rack_serial_number": "chassis_serial_number",
                     "chassis_physical_slot_number": "slot_number",
                     "compute_slot_index": "tray_index", "node_index": "host_id"},
    "remapped_rows": {"correctable_error": "remapped_row_corr",
                      "uncorrectable_error": "remapped_row_unc",
                      "pending": "remapped_row_pending",
                      "remapping_failure_occurred": "remapped_row_failure",
                      "bank_remap_availability_histogram": "row_remapper_histogram"},
    "row_remapper_histogram": {k: f"row_remapper_histogram_{k}"
                               for k in ("max", "high", "partial", "low", "none")},
    "retired_pages": {"single_bit_ecc": "multiple_single_bit_retirement/retired_count",
                      "double_bit_ecc": "double_bit_retirement/retired_count",
                      "pending_page_blacklist": "pending_blacklist"},
    "temperature": {"gpu_current_temp": "gpu_temp", "gpu_t_limit_temp": "gpu_temp_tlimit",
                    "gpu_shutdown_t_limit_temp": "gpu_temp_max_tlimit_threshold",
                    "gpu_slowdown_t_limit_temp": "gpu_temp_slow_tlimit_threshold",
                    "gpu_max_operating_t_limit_temp": "gpu_temp_max_gpu_tlimit_threshold",
                    "memory_current_temp": "memory_temp",
                    "memory_max_operating_t_limit_temp": "gpu_temp_max_mem_tlimit_threshold",
                    # before Hopper: absolute limits
                    "gpu_shutdown_temp": "gpu_temp_max_threshold",
                    "gpu_slowdown_temp": "gpu_temp_slow_threshold",
                    "gpu_max_operating_temp": "gpu_temp_max_gpu_threshold",
                    "memory_max_operating_temp": "gpu_temp_max_mem_threshold"},
    "utilization": {k: f"{k}_util"
                    for k in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")},
    "voltage": {"graphics": "graphics_volt"},
    "gpu": {"serial_number": "serial", "gpu_uuid": "uuid", "bus_id": "pci_bus_id",
            "fru_part_number": "gpu_fru_part_number", "gpu_c2c_mode": "c2c_mode",
            "platform_info": "platformInfo",
            "conf_compute_protected_memory_usage": "cc_protected_memory_usage",
            "inforom_bbx_object_flush": "inforom_bbx_flush"},
}
# Fields under the GPU in -q that sit in a section of their own in the XML.
ANYWHERE = {"bus_id": "pci_bus_id", "device_id": "pci_device_id",
            "sub_system_id": "pci_sub_system_id"}


def xml_tag(parent, label_tag):
    """The XML tag (or "section/leaf") of a -q label under `parent` (an XML tag)."""
    own = IN_PARENT.get(parent.lower(), {})
    return own.get(label_tag) or ANYWHERE.get(label_tag) or label_tag
