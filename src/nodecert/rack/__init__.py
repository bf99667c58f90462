"""The rack stage: a rack-scale NVLink domain (a GB200/GB300 NVL72 or NVL36) judged as
one unit -- every compute tray's place in the domain, the rules across the trays, the
switch trays, power shelves and coolant unit read over Redfish, firmware consistency --
and recorded as one rack run for the rack certificate.

  infra     pure: Redfish documents of a switch tray, power shelf or CDU, normalised
  gather    the Redfish walks that fetch those documents (and the sampling)
  judge     pure: the rack's verdicts, one Result per rule
  sweep     pure: the NVLink domain's bandwidth sweep (GPU pairs across trays) and the
            GPU it names
  load      the domain under load: the rack-wide all-reduce and the sweep's jobs, run
            through the cluster's job engine
  validate  `nodecert rack validate`: the trays' node checks, the walks, the jobs, the
            record

It may import core, inventory, runs, bmc (the Redfish client), validation (the trays'
node runs) and cluster (its job engine and pairing), and the node package's contract;
the certificate (certs) reads its record, never this package.
"""
