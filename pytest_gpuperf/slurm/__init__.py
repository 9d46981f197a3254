"""Slurm: reading a job's node list, a local Slurm on loopback for tests and trials, node acceptance as one job.

``nodelist`` expands Slurm's compressed node lists and finds a node's address; ``local`` starts and stops a real
Slurm (munged, slurmctld, N slurmd) in a scratch folder; ``acceptance`` runs one step per node of an allocation
and hands the gathered results to ``gpuperf fleet``. docs/distributed.md and docs/fleet.md say how to use them.
"""
