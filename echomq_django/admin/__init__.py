"""The admin dashboard: bounded reads of the live sets (:mod:`.reads`), the
actions staff may take (:mod:`.actions`, each one atomic script), the pages
(:mod:`.views`), the actions' views (:mod:`.dispatch`), how times and charts
are shown (:mod:`.present`), and the "EchoMQ > Queues" entry in Django's
admin (:mod:`.site`, registered by the app config only when
``django.contrib.admin`` is installed). Importing this package has no side
effects: :mod:`.reads` and :mod:`.actions` work without the admin site.
"""
