"""The rack stage: a rack-scale NVLink domain (a GB200/GB300 NVL72 or NVL36) judged as
one unit -- every compute tray's place in the domain, the rules across the trays, the
switch trays, power shelves and coolant unit read over Redfish, firmware consistency --
and recorded as one rack run for the rack certificate.

  infra     pure: Redfish documents of a switch tray, power shelf or CDU, normalised
  gather    the Redfish walks that fetch those documents (and the sampling)
  judge     pure: the rack's verdicts, one Result per rule
  validate  `nodecert rack validate`: the trays' node checks, the walks, the record

It may import core, inventory, runs, bmc (the Redfish client) and validation (the trays'
node runs), and the node package's contract; the certificate (certs) reads its record,
never this package.
"""
