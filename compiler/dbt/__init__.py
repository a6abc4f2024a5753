"""Reading dbt-core projects as they are (``dbt_project.yml``, ``profiles.yml``, schema YAML
``sources:``, dbt's config names, schema naming and Jinja context).

==============  ==============================================================================
``project.py``  dbt_project.yml and the profile's outputs → mvflow's ``Project`` (dialect dbt)
``config.py``   a model's dbt config → mvflow's (hooks, file_format, materializations), with one
                warning line per dbt setting mvflow does not apply
``sources.py``  ``sources:`` of schema YAML → plain sources (read in full: no change mode)
``docs.py``     ``{% docs %}`` blocks for ``doc()``
==============  ==============================================================================

mvflow's own kinds (``mv``, ``fact``) and change modes stay in mvflow's project format.
"""
